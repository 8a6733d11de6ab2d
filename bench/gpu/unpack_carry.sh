#!/usr/bin/env bash
# Sourced by the GPU-host scripts: `unpack_carry DIR TAG` prints a directory holding DIR's binaries, runnable.
# Binaries staged xz-compressed (the carry limit is 64 MiB) are unpacked into a fresh /tmp/TAG.XXXXXX; a DIR
# without .xz files is printed as it is.
unpack_carry() {
  local dir="$1" tag="$2"
  if ! compgen -G "$dir/*.xz" >/dev/null; then
    echo "$dir"
    return
  fi
  local unpacked
  unpacked="$(mktemp -d "/tmp/$tag.XXXXXX")"
  for packed in "$dir"/*.xz; do xz -dc "$packed" >"$unpacked/$(basename "$packed" .xz)"; done
  chmod +x "$unpacked"/*
  echo "$unpacked"
}

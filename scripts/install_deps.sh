#!/usr/bin/env bash
# Installs Calorimeter's build dependencies from Debian's packages (idempotent: skips what is installed).
# Why each is needed: docs/DEPENDENCIES.md.
set -euo pipefail
packages=(cmake ninja-build g++ pkg-config libcli11-dev libyaml-cpp-dev nlohmann-json3-dev libfmt-dev libspdlog-dev
  libsqlite3-dev libgtest-dev libgmock-dev libbenchmark-dev libopenmpi-dev openmpi-bin libopenblas-dev python3)
missing=()
for package in "${packages[@]}"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "calo: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

#!/usr/bin/env bash
# Installs Calorimeter's build dependencies from Debian's packages (idempotent: skips what is installed).
# Why each is needed: docs/DEPENDENCIES.md.
set -euo pipefail
packages=(cmake ninja-build g++ pkg-config libcli11-dev libyaml-cpp-dev nlohmann-json3-dev libfmt-dev libspdlog-dev
  libsqlite3-dev libgtest-dev libgmock-dev libbenchmark-dev libopenmpi-dev openmpi-bin libopenblas-dev python3 python3-pip
  chromium fonts-dejavu-core)
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
# nvml.h (types and field ids for the NVML source, which loads libnvidia-ml with dlopen): PyPI nvidia-nvml-dev,
# headers only, unpacked into .whl/nvml/include (git-ignored). Skipped when already there or pip is missing.
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
nvml_dir="$repo_root/.whl/nvml"
if [ ! -f "$nvml_dir/include/nvml.h" ] && command -v python3 >/dev/null; then
  mkdir -p "$nvml_dir/wheel" "$nvml_dir/include"
  if python3 -m pip download --quiet --no-deps 'nvidia-nvml-dev==13.0.*' -d "$nvml_dir/wheel" >/dev/null 2>&1; then
    python3 - "$nvml_dir" <<'PY'
import glob, sys, zipfile
root = sys.argv[1]
wheel = sorted(glob.glob(root + "/wheel/nvidia_nvml_dev-*.whl"))[-1]
with zipfile.ZipFile(wheel) as archive:
    name = next(n for n in archive.namelist() if n.endswith("/include/nvml.h"))
    open(root + "/include/nvml.h", "wb").write(archive.read(name))
PY
    echo "calo: nvml.h unpacked into $nvml_dir/include"
  else
    echo "calo: could not download nvidia-nvml-dev; the NVML source will report it was built without nvml.h"
  fi
fi

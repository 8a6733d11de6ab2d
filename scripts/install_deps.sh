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
# cudnn_frontend.h (NVIDIA's header-only C++ graph API over cuDNN 9, used for fused SDPA attention in the CUDA
# backend; bundles its own nlohmann/json under cudnn_frontend/thirdparty): PyPI nvidia-cudnn-frontend, the
# wheel's include/ unpacked into .whl/cudnn_frontend/include (git-ignored). cuDNN itself comes with the CUDA
# toolkit. Skipped when already there or pip is missing; without it attention uses the cuBLASLt fallback.
cudnn_fe_dir="$repo_root/.whl/cudnn_frontend"
if [ ! -f "$cudnn_fe_dir/include/cudnn_frontend.h" ] && command -v python3 >/dev/null; then
  mkdir -p "$cudnn_fe_dir/wheel" "$cudnn_fe_dir/include"
  if python3 -m pip download --quiet --no-deps 'nvidia-cudnn-frontend==1.32.*' -d "$cudnn_fe_dir/wheel" >/dev/null 2>&1; then
    python3 - "$cudnn_fe_dir" <<'PY'
import glob, os, sys, zipfile
root = sys.argv[1]
wheel = sorted(glob.glob(root + "/wheel/nvidia_cudnn_frontend-*.whl"))[-1]
with zipfile.ZipFile(wheel) as archive:
    for name in archive.namelist():
        if name.startswith("include/") and name.endswith((".h", ".hpp")):
            target = os.path.join(root, name)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            open(target, "wb").write(archive.read(name))
PY
    echo "calo: cudnn_frontend headers unpacked into $cudnn_fe_dir/include"
  else
    echo "calo: could not download nvidia-cudnn-frontend; CUDA attention will use the cuBLASLt fallback"
  fi
fi

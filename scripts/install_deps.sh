#!/usr/bin/env bash
# Installs Calorimeter's build dependencies from Debian's packages (idempotent: skips what is installed).
# Why each is needed: docs/DEPENDENCIES.md.
set -euo pipefail
packages=(cmake ninja-build g++ pkg-config libcli11-dev libyaml-cpp-dev nlohmann-json3-dev libfmt-dev libspdlog-dev
  libsqlite3-dev libgtest-dev libgmock-dev libbenchmark-dev libopenmpi-dev openmpi-bin libopenblas-dev python3 python3-pip
  chromium fonts-dejavu-core libpng-dev python3-pandas python3-pytest prometheus zlib1g-dev
  clang-14 libclang-rt-14-dev llvm-14 ccache)
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
  # prometheus is for the live-metrics test only (it starts its own server on a free loopback port): the system
  # service Debian's package enables where systemd runs is switched off again when this script installed it.
  if [[ " ${missing[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null &&
    systemctl is-enabled prometheus >/dev/null 2>&1; then
    $sudo_cmd systemctl disable --now prometheus >/dev/null 2>&1 || true
  fi
fi
# Header-only PyPI wheels, unpacked into .whl/<name>/include (git-ignored); skipped when already there or pip
# is missing. fetch_headers NAME SPEC MEMBER_SUFFIX... : every wheel member under an include/ directory whose
# name ends with one of the suffixes lands in .whl/NAME/include/<path below include/>.
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fetch_headers() {
  local name="$1" spec="$2"
  shift 2
  local dir="$repo_root/.whl/$name"
  mkdir -p "$dir/wheel" "$dir/include"
  python3 -m pip download --quiet --no-deps "$spec" -d "$dir/wheel" >/dev/null 2>&1 || return 1
  python3 - "$dir" "$@" <<'PY'
import glob, os, sys, zipfile
root, suffixes = sys.argv[1], tuple(sys.argv[2:])
wheel = sorted(glob.glob(root + "/wheel/*.whl"))[-1]
with zipfile.ZipFile(wheel) as archive:
    for member in archive.namelist():
        if "include/" in member and member.endswith(suffixes):
            target = os.path.join(root, "include", member.split("include/", 1)[1])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            open(target, "wb").write(archive.read(member))
PY
  echo "calo: $spec headers unpacked into $dir/include"
}
# nvml.h: types and field ids for the NVML source, which loads libnvidia-ml with dlopen (PyPI nvidia-nvml-dev).
if [ ! -f "$repo_root/.whl/nvml/include/nvml.h" ] && command -v python3 >/dev/null; then
  fetch_headers nvml 'nvidia-nvml-dev==13.0.*' nvml.h ||
    echo "calo: could not download nvidia-nvml-dev; the NVML source will report it was built without nvml.h"
fi
# cudnn_frontend.h: NVIDIA's header-only C++ graph API over cuDNN 9, for fused SDPA attention in the CUDA backend
# (bundles its own nlohmann/json under cudnn_frontend/thirdparty); cuDNN itself comes with the CUDA toolkit.
# Without it attention uses the cuBLASLt fallback.
if [ ! -f "$repo_root/.whl/cudnn_frontend/include/cudnn_frontend.h" ] && command -v python3 >/dev/null; then
  fetch_headers cudnn_frontend 'nvidia-cudnn-frontend==1.32.*' .h .hpp ||
    echo "calo: could not download nvidia-cudnn-frontend; CUDA attention will use the cuBLASLt fallback"
fi

#!/usr/bin/env bash
# The main job: install, build, and characterize what this machine has, ending in a summary.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
./scripts/build.sh
calo=${CALO_BUILD_DIR:-build}/calo
echo "== model: Llama3-70B on 64 GPUs (TP8-PP4-DP2) =="
"$calo" model llama3-70b --tp 8 --pp 4 --dp 2 --gbs 128
echo
echo "== execution graph of rank 0: per-stream summary =="
"$calo" graph --model llama3-70b --tp 8 --pp 4 --dp 2 --gbs 128 --rank 0

#!/usr/bin/env bash
# The simulator against published training runs: bash bench/published/run.sh CALO [--json OUT] [--source NAME]
# [--check EXPECTED] [--record EXPECTED]. Every row of bench/published/sources/*.yaml, published vs predicted
# (README.md there; no network).
set -euo pipefail
exec python3 "$(dirname "$0")/run.py" "$@"

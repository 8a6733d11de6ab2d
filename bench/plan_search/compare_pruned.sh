#!/usr/bin/env bash
# Runs one `calo plan` search pruned and with --no-prune and says whether the ranking rows are identical
# (docs/benchmarks/plan-search.md). Usage: compare_pruned.sh CALO PLAN-ARGS...
set -euo pipefail
calo=$1
shift
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
start=$(date +%s.%N)
"$calo" plan "$@" -q >"$out/pruned.txt"
middle=$(date +%s.%N)
"$calo" plan "$@" -q --no-prune >"$out/full.txt"
end=$(date +%s.%N)
echo "calo plan $*"
sed -n 3p "$out/pruned.txt"
awk -v a="$start" -v b="$middle" -v c="$end" 'BEGIN { printf "pruned %.1f s, --no-prune %.1f s\n", b - a, c - b }'
rows() { grep -E '^ *[0-9]+ +TP' "$1"; }
if diff <(rows "$out/pruned.txt") <(rows "$out/full.txt") >/dev/null; then
  echo "ranking identical ($(rows "$out/pruned.txt" | wc -l) rows)"
else
  echo "ranking differs:"
  diff <(rows "$out/pruned.txt") <(rows "$out/full.txt") || true
  exit 1
fi

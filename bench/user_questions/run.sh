#!/usr/bin/env bash
# The seven questions of issue 66, each answered by one command a newcomer can copy, timed, with the line of
# its text output that answers it (no --json, no arithmetic). Prints a Markdown table for
# docs/benchmarks/user-questions.md.
# Usage: bench/user_questions/run.sh [BUILD_DIR]   (default build; runs land under a temporary directory)
set -euo pipefail
cd "$(dirname "$0")/../.."
calo=$PWD/${1:-build}/calo
work=$(mktemp -d /tmp/calo-user-questions.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
echo "# host: $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg); calo: $calo"
echo "| question | command | wall s | the answer, as printed |"
echo "| --- | --- | --- | --- |"
# ask QUESTION PATTERN COMMAND...: runs COMMAND, times it, prints the first output line matching PATTERN.
ask() {
  local question=$1 pattern=$2
  shift 2
  local start end answer
  start=$(date +%s%N)
  "$@" > out.txt 2>&1 || true
  end=$(date +%s%N)
  answer=$(grep -m1 -E -- "$pattern" out.txt | sed 's/|/\\|/g; s/^ *//' | cut -c1-220)
  local shown=${*//$calo/calo}
  shown=${shown//$work\//}
  echo "| $question | \`$shown\` | $(printf '%.2f' "$(echo "scale=3; ($end - $start) / 1000000000" | bc)") | $answer |"
}
ask "Which layout for Llama3-70B on 64 H100?" '^1 ' \
  "$calo" plan --model llama3-70b --cluster h100-hgx-calibrated --gpus 64 --gbs 512 --tp 8 --top 3 -q
ask "What does training 1T tokens cost?" 'cost|USD' \
  "$calo" sim --model llama3-70b --cluster h100-hgx-calibrated --gpus 64 --tp 8 --pp 4 --gbs 512 --zero 1 \
  --tokens 1e12 --price-per-kwh 0.1 --currency USD --no-store
ask "Which power cap saves energy?" '^1 ' \
  "$calo" plan --model llama3-70b --cluster h100-hgx-calibrated --gpus 64 --gbs 512 --tp 8 --pp 4 --mbs 1,2 \
  --power-cap 400,500,600,700 --objective energy --top 3 -q
"$calo" sim --model llama3-8b --cluster h100-hgx-calibrated --gpus 8 --gbs 32 --seq 4096 --zero 1 --tp 2 \
  --out tp2 > /dev/null
"$calo" sim --model llama3-8b --cluster h100-hgx-calibrated --gpus 8 --gbs 32 --seq 4096 --zero 1 --tp 1 \
  --out tp1 > /dev/null
ask "Which of two layouts is better, by how much?" 'which is better' "$calo" compare tp2 tp1
pydir=$(cd "$(dirname "$calo")/.." && pwd)/python
printf '%s\n' "import os, sys, time" "sys.path.insert(0, '$pydir')" "import calo" \
  "slow = float(os.environ.get('SLOW', '1'))" "for i in range(8):" "    with calo.step(i):" \
  "        t = time.time()" "        while time.time() - t < 0.1 * slow: pass" > train.py
(RANK=0 "$calo" record --quiet --out node0 -- python3 train.py > /dev/null 2>&1) &
RANK=1 SLOW=1.4 "$calo" record --quiet --out node1 -- python3 train.py > /dev/null 2>&1
wait
"$calo" merge node0 node1 --out all > /dev/null
ask "Two nodes under Slurm: which node holds the job back?" 'straggler' "$calo" report all --out report.html
ask "What will 8,192 GPUs do and draw?" 'MW|cluster power' \
  "$calo" sim --model gpt3-175b --cluster h200-hgx --gpus 8192 --tp 8 --pp 16 --gbs 1536 --no-store
# A Python with pandas (python/README.md "Install": a venv where the system's has none).
python=python3
python3 -c 'import pandas' 2> /dev/null || python=/usr/bin/python3
ask "The runs in pandas: which rank is slower?" 'is slower' "$python" -c \
  "import sys; sys.path.insert(0, '$pydir'); import calo; s = calo.load_run('all').steps.groupby('rank_idx')['duration_s'].median(); print(f'rank {s.idxmax()} is slower: median step {s.max():.3f} s against {s.min():.3f} s')"

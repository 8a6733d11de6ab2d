#!/usr/bin/env bash
# data/clusters/h100x4-nvlink-calibrated.yaml, the 4 x H100 NVLink host (docs/SIMULATOR.md, "The 4 x H100
# host"): h100-hgx-calibrated's single-GPU fit on a node of four GPUs, with the collective line shapes fitted to
# Kineto sweeps on 4 x H200 (h200-hgx-calibrated's `collective` and NVLink figures), then `calo calibrate --stages
# link,wait` on the quiet multi-GPU runs of tests/fixtures/h100x4-nvlink: the node's NVLink bandwidth from the
# steps, the power while waiting from their energy. Every other parameter keeps the single-GPU fit.
# Usage: bench/calibrate/h100x4_refit.sh CALO OUT.yaml [--no-loo]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
calo="$1" out="$2"
shift 2
work="$(mktemp -d /tmp/calo-h100x4.XXXXXX)"
trap 'rm -rf "$work"' EXIT
tar -xJf "$repo/tests/fixtures/h100x4-nvlink/runs.txz" -C "$work"
python3 - "$repo/data/clusters" "$work/base.yaml" <<'PY'
import sys, yaml
clusters, out = sys.argv[1], sys.argv[2]
h100 = yaml.safe_load(open(f"{clusters}/h100-hgx-calibrated.yaml"))
h200 = yaml.safe_load(open(f"{clusters}/h200-hgx-calibrated.yaml"))
h100["name"] = "h100x4-nvlink"
# How the host joins its GPUs was not recorded. Its steps fit a switch (every group on all of a GPU's links) and
# refute an HGX H100 4-GPU board's direct mesh (`nvlink_topology: direct`, 6 links a pair): docs/SIMULATOR.md
# "NVLink topology", test H100x4.TheStepsRefuteADirectMeshOfSixLinksAPair.
h100["description"] = "4 x H100 80GB HBM3 (SXM, 700 W) of one host, NVLink; its steps fit an NVSwitch node"
h100["node"]["gpus"] = 4
for key in ("slot_inlet_offset_c", "slot_r_scale"):
    h100["node"][key] = h100["node"][key][:4]
h100["collective"] = h200["collective"]
for key in ("nvlink_bandwidth_gb_s", "nvlink_latency_us"):
    h100["node"][key] = h200["node"][key]
# The fitted stages start where the single-GPU fit left them (no power while waiting), so a rerun on the
# refitted preset reproduces it.
h100["gpu"]["wait_power_w"] = 0
h100["gpu"]["wait_power_decay_ms"] = 0
yaml.safe_dump(h100, open(out, "w"), sort_keys=False)
PY
runs=()
for name in fam-tp1pp1dp4cp1ep1 fam-tp2pp1dp2cp1ep1 fam-tp4pp1dp1cp1ep1 fam-tp1pp2dp2cp1ep1 fam-tp2pp2dp1cp1ep1 \
  fam-tp1pp4dp1cp1ep1 plan1 plan2 plan3 plan4 plan5 plan6 b0-uniform-quiet b0-planned-quiet; do
  runs+=("runs/$name")  # relative: the provenance names the fixture's runs, not this machine's temp dir
done
fitted="$(basename "$out")"  # the cluster's name is its file's
(cd "$work" && "$calo" calibrate "${runs[@]}" --cluster base.yaml --stages link,wait --out "$fitted" "$@")
{
  echo "# A 4 x H100 NVLink host (bench/calibrate/h100x4_refit.sh): h100-hgx-calibrated's single-GPU fit on a node"
  echo "# of four; collective line shapes and NVLink latency carried from h200-hgx-calibrated (Kineto sweeps on"
  echo "# 4 x H200, tests/fixtures/kineto-h200x4-collectives); NVLink bandwidth (stage link) and power while waiting"
  echo "# (stage wait) fitted to tests/fixtures/h100x4-nvlink. Extrapolates across nodes (no such run)."
  cat "$work/$fitted"
} >"$out"
echo "wrote $out"

#!/usr/bin/env python3
"""torchtitan's float8 beside `calo bench --precision fp8` on one GPU (issue 63 item 4), from the runs directory that
`TITAN_CASES="calo calo-fp8 eager float8 compile" bash bench/torchtitan/run.sh` packs into titan_runs.tar.gz.

For each run it prints the measured step (the recorded step windows), tokens/s, mean and peak power, energy per step
and the allocator's peak; then `calo sim` of the same slice and precision on the card's calibrated preset, with the
errors; then the FP8/bf16 speed-up of each trainer and the memory model (`calo model --trainer torchtitan`) against
torchtitan's peak. Nothing here is fitted: the preset's FP8 line came from other runs (docs/benchmarks/fp8.md).

  python3 bench/torchtitan/fp8_peer.py CALO RUNS_DIR [--cluster h100-hgx-calibrated] [--gbs 1] [--json OUT] [--max-step-error 0.03]
"""
import argparse
import json
import pathlib
import subprocess
import sys

RUNS = [  # (run, trainer, precision, compiled)
    ("calo-bench", "calo", "bf16", False),
    ("calo-fp8", "calo", "fp8", False),
    ("titan-eager", "torchtitan", "bf16", False),
    ("titan-eager-fp8", "torchtitan", "fp8", False),
    ("titan-compile", "torchtitan", "bf16", True),
    ("titan-compile-fp8", "torchtitan", "fp8", True),
]
SLICE = ["--model", "llama3-8b", "--layers", "4", "--seq", "8192"]


def calo_json(calo, *args):
    """The JSON `calo ARGS --json` prints."""
    out = subprocess.run([calo, *args, "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out[out.find("{"):])


def measured_all(calo, run_dirs):
    """Step, mean/peak power per GPU, energy per step and SM clock of each recorded run, from one `calo compare
    RUNS --json` (its step windows: calo bench's own, torchtitan's step lines under `calo record`)."""
    report = calo_json(calo, "compare", *map(str, run_dirs))
    rows = {row["key"]: row["values"] for row in report["rows"]}
    names = {"step_s": "step_time_p50_s", "mean_power_w": "power_gpu_mean_w", "peak_power_w": "power_gpu_peak_w",
             "energy_per_step_j": "energy_per_step_j", "sm_clock_mean_mhz": "sm_clock_mean_mhz"}
    return [{ours: rows[theirs][i] for ours, theirs in names.items()} for i in range(len(run_dirs))]


def simulated(calo, cluster, precision, gbs):
    """`calo sim` of the slice at `precision` and `gbs` sequences a step: step and energy per step (GPU)."""
    report = calo_json(calo, "sim", *SLICE, "--gbs", str(gbs), "--precision", precision, "--cluster", cluster,
                       "--no-store")
    return {"step_s": report["iteration_s"], "energy_per_step_j": report["energy_per_step_j"]}


def modelled_peak_bytes(calo, precision):
    """The memory model's peak per GPU under torchtitan's accounting."""
    report = calo_json(calo, "model", *SLICE, "--gbs", "1", "--precision", precision, "--trainer", "torchtitan")
    return report["memory_per_gpu"]["total_bytes"]


def error(predicted, actual):
    return None if predicted is None or not actual else predicted / actual - 1


def row_of(calo, runs_dir, cluster, gbs, spec, figures):
    name, trainer, precision, compiled = spec
    row = {"run": name, "trainer": trainer, "precision": precision, "compiled": compiled}
    row.update(figures)
    sim = simulated(calo, cluster, precision, gbs)
    row["sim_step_s"], row["sim_energy_per_step_j"] = sim["step_s"], sim["energy_per_step_j"]
    row["sim_step_error"] = error(sim["step_s"], row["step_s"])
    row["sim_energy_error"] = error(sim["energy_per_step_j"], row["energy_per_step_j"])
    titan = runs_dir / f"{name}.json"
    if titan.exists():
        summary = json.loads(titan.read_text())
        row["titan_step_s_mean"] = summary["step_s_mean"]
        row["peak_allocated_bytes"] = summary["peak_allocated_bytes"]
        row["model_peak_bytes"] = modelled_peak_bytes(calo, precision)
        row["memory_error"] = error(row["model_peak_bytes"], row["peak_allocated_bytes"])
    return row


def pct(value):
    return "—" if value is None else f"{value * 100:+.1f} %"


def print_table(rows):
    print("| run | step (s) | mean / peak W | J/step | sim step (err) | sim J (err) | peak GiB measured / model (err) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        memory = (f"{r['peak_allocated_bytes'] / 2**30:.2f} / {r['model_peak_bytes'] / 2**30:.2f} "
                  f"({pct(r['memory_error'])})" if "memory_error" in r else "—")
        print(f"| {r['run']} | {r['step_s']:.4f} | {r['mean_power_w']:.0f} / {r['peak_power_w']:.0f} | "
              f"{r['energy_per_step_j']:.1f} | {r['sim_step_s']:.4f} ({pct(r['sim_step_error'])}) | "
              f"{r['sim_energy_per_step_j']:.1f} ({pct(r['sim_energy_error'])}) | {memory} |")


def speedups(rows):
    """FP8's step gain over bf16 for each trainer and mode, measured and simulated: 1 - fp8 step / bf16 step."""
    by = {(r["trainer"], r["compiled"], r["precision"]): r for r in rows}
    gains = {}
    for trainer, compiled in (("calo", False), ("torchtitan", False), ("torchtitan", True)):
        bf16, fp8 = by.get((trainer, compiled, "bf16")), by.get((trainer, compiled, "fp8"))
        if bf16 and fp8:
            label = f"{trainer}{' compiled' if compiled else (' eager' if trainer == 'torchtitan' else '')}"
            gains[label] = {"measured": 1 - fp8["step_s"] / bf16["step_s"],
                            "simulated": 1 - fp8["sim_step_s"] / bf16["sim_step_s"]}
    return gains


def step_verdict(rows):
    """Issue 63's step target, where both runs are present: calo bench's FP8 step at or below torchtitan float8's
    compiled step on the same GPU (None otherwise)."""
    by = {r["run"]: r for r in rows}
    calo, titan = by.get("calo-fp8"), by.get("titan-compile-fp8")
    if not calo or not titan:
        return None
    met = calo["step_s"] <= titan["step_s"]
    return (f"FP8 step, calo bench {calo['step_s']:.4f} s against torchtitan float8 compiled {titan['step_s']:.4f} s: "
            f"{'at or below (met)' if met else 'above (missed)'}, {calo['step_s'] / titan['step_s'] - 1:+.1%}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("calo")
    parser.add_argument("runs", type=pathlib.Path)
    parser.add_argument("--cluster", default="h100-hgx-calibrated")
    parser.add_argument("--gbs", type=int, default=1, help="sequences a step (run.sh's runs: 1)")
    parser.add_argument("--json", default="")
    parser.add_argument("--max-step-error", type=float, default=0,
                        help="exit 1 when a run's |simulated / measured step - 1| exceeds this (e.g. 0.03)")
    args = parser.parse_args()
    present = [spec for spec in RUNS if (args.runs / spec[0]).is_dir()]
    if len(present) < 2:
        sys.exit(f"fp8_peer.py: fewer than two runs of {[spec[0] for spec in RUNS]} under {args.runs}")
    figures = measured_all(args.calo, [args.runs / spec[0] for spec in present])
    rows = [row_of(args.calo, args.runs, args.cluster, args.gbs, spec, f) for spec, f in zip(present, figures)]
    print_table(rows)
    gains = speedups(rows)
    for label, gain in gains.items():
        print(f"FP8 gain over bf16, {label}: measured {gain['measured'] * 100:.1f} %, "
              f"simulated {gain['simulated'] * 100:.1f} %")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"cluster": args.cluster, "rows": rows, "gains": gains},
                                                      indent=1))
    verdict = step_verdict(rows)
    if verdict:
        print(verdict)
    # calo sim simulates calo's graph: its error is checked on calo's own runs; torchtitan's are shown beside.
    beyond = [r["run"] for r in rows if r["trainer"] == "calo" and args.max_step_error > 0
              and abs(r["sim_step_error"]) > args.max_step_error]
    if beyond:
        sys.exit(f"fp8_peer.py: simulated step beyond {args.max_step_error * 100:g} % of measured: {', '.join(beyond)}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Prints one line per run of bench/torchtitan/run.sh: torchtitan's own JSON (titan_train.py --json), the peak
memory of its last logged step (`memory: X GiB`, torch's max reserved), every other rank's step and peak, and each
`calo bench --json` report in a calo-*.log; usage: summarize.py RUNS_DIR."""
import json
import pathlib
import re
import sys


def logged_peak_gib(log):
    """Max reserved GiB of the last step torchtitan logged (its line `... memory: 34.88GiB(24.95%) ...`)."""
    found = re.findall(r"step: *\d+ .*?memory: *([0-9.]+)GiB", log.read_text(errors="replace")) if log.exists() else []
    return float(found[-1]) if found else float("nan")


def calo_bench(log):
    """The JSON report that `calo bench --json` printed into its log, or None."""
    text = log.read_text(errors="replace")
    start = text.find("{")
    if start < 0:
        return None
    return json.JSONDecoder().raw_decode(text[start:])[0]


def main():
    runs = pathlib.Path(sys.argv[1])
    for path in sorted(runs.glob("*.json")):
        r = json.loads(path.read_text())
        if r.get("peer") != "torchtitan":
            continue
        if r.get("rank", 0) > 0:  # another rank of a several-GPU run: its own step time and memory
            print(f"{path.stem}: step {r['step_s_mean'] * 1e3:.1f} ms mean, peak allocated "
                  f"{r['peak_allocated_bytes'] / 2**30:.2f} GiB, allocated after the last step "
                  f"{r['allocated_after_last_step_bytes'] / 2**30:.2f} GiB")
            continue
        print(f"{path.stem}: torchtitan {r['torchtitan_version']} torch {r['torch_version']} on {r['device']}, "
              f"compile {r['compile']}, ac {r['ac']}: step {r['step_s_mean'] * 1e3:.1f} ms mean "
              f"(min {r['step_s_min'] * 1e3:.1f}, max {r['step_s_max'] * 1e3:.1f}, {r['steps_kept']} steps), "
              f"{r['tokens_per_s']:.0f} tokens/s, peak reserved {logged_peak_gib(runs / (path.stem + '.log')):.2f} GiB "
              f"(torchtitan's log), peak allocated {r.get('peak_allocated_bytes', float('nan')) / 2**30:.2f} GiB, "
              f"allocated after the last step "
              f"{r.get('allocated_after_last_step_bytes', r.get('peak_allocated_bytes', 0)) / 2**30:.2f} GiB")
    for log in sorted(runs.glob("calo-*.log")):
        report = calo_bench(log)
        if report is None:
            print(f"{log.stem}: no JSON report in its log")
        else:
            print(f"{log.stem}: " + json.dumps(report)[:1500])


if __name__ == "__main__":
    main()

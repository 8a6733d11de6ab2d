#!/usr/bin/env python3
"""The memory ground-truth lines (tests/fixtures/memory-truth-*/torchtitan.jsonl) of bench/torchtitan/run.sh's
memory runs: one JSON line per torchtitan run named mem-NAME (or any run named on the command line) in RUNS_DIR,
with every rank's peak.

Usage: memory_jsonl.py RUNS_DIR [RUN ...] > torchtitan.jsonl

Each line: `name` (the run's name less mem-), `trainer`, `torch`, `device`, `compile`, `layers`, `seq`, `mbs`
(torchtitan's local batch), `recompute` (its activation checkpointing), `world`, `tp`, `pp`, `cp`, `data_parallel`
("fsdp" when torchtitan shards over dp*cp > 1 ranks, "ddp" when it replicates, "none" on one GPU),
`peak_allocated_bytes` (rank 0: the highest max_memory_allocated over the steps after the warm-up),
`peak_allocated_bytes_by_rank`, `peak_reserved_gib_logged` (rank 0's last `memory:` log figure),
`resident_after_step_bytes` (rank 0: allocated after the last step) and `step_ms` (rank 0's mean step)."""
import json
import pathlib
import sys

from summarize import logged_peak_gib


def data_parallel(run):
    """How torchtitan spread the data: fsdp, ddp or none (its flags and world size)."""
    flags = run["torchtitan_flags"]
    if "--parallelism.data_parallel_replicate_degree" in flags:
        return "ddp"
    return "fsdp" if run["world"] // (run["tp"] * run["pp"]) > 1 else "none"


def line(runs, name):
    """The fixture line of run `name` (its rank files beside it)."""
    ranks = [json.loads((runs / f"{name}.json").read_text())]
    rank = 1
    while (runs / f"{name}.rank{rank}.json").exists():
        ranks.append(json.loads((runs / f"{name}.rank{rank}.json").read_text()))
        rank += 1
    run = ranks[0]
    return {
        "name": name.removeprefix("mem-"), "trainer": f"torchtitan {run['torchtitan_version']}",
        "torch": run["torch_version"], "device": run["device"], "compile": run["compile"], "layers": run["layers"],
        "seq": run["seq"], "mbs": run["local_batch"], "recompute": run["ac"], "world": run["world"],
        "tp": run["tp"], "pp": run["pp"], "cp": run.get("cp", 1), "data_parallel": data_parallel(run),
        "peak_allocated_bytes": run["peak_allocated_bytes"],
        "peak_allocated_bytes_by_rank": [r["peak_allocated_bytes"] for r in ranks],
        "peak_reserved_gib_logged": logged_peak_gib(runs / f"{name}.log"),
        "resident_after_step_bytes": run["allocated_after_last_step_bytes"], "step_ms": run["step_s_mean"] * 1e3,
    }


def main():
    runs = pathlib.Path(sys.argv[1])
    names = sys.argv[2:] or sorted(p.stem for p in runs.glob("mem-*.json") if ".rank" not in p.stem)
    for name in names:
        print(json.dumps(line(runs, name)))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The fixture lines of a bench/memory_real/run.sh work directory (tests/fixtures/memory-real-h200x2/README.md).

Usage: fixture.py WORK_DIR > memory_real.jsonl   (WORK_DIR holds status.txt, NAME.json and NAME.err per run)
"""
import json
import pathlib
import re
import sys

RANK_FIELDS = ("rank", "stage", "held_peak_bytes", "state_in_optimizer_operands_bytes", "device_used_bytes",
               "ledger_serial_peak_bytes", "backend_buffers_bytes", "operands_carved_bytes")


def device_name(work: pathlib.Path) -> str:
    """The first GPU's name from run.sh's `nvidia-smi -L` (gpus.txt), e.g. "NVIDIA H100 80GB HBM3"."""
    match = re.search(r"GPU 0: (.+?) \(UUID", (work / "gpus.txt").read_text())
    return match.group(1) if match else "unknown"


def main(work: pathlib.Path) -> None:
    device = device_name(work)
    for line in (work / "status.txt").read_text().splitlines():
        match = re.match(r"(\S+): exit (\d+) \((.*)\)", line)
        if not match:
            continue
        name, exit_code, args = match.group(1), int(match.group(2)), match.group(3)
        record = {"name": name, "args": args, "exit": exit_code, "device": device, "model": "llama3-8b",
                  "seq": 8192}
        try:
            report = json.loads((work / f"{name}.json").read_text())
        except ValueError:
            errors = (work / f"{name}.err").read_text().strip().splitlines()
            record["error"] = errors[-1] if errors else ""
            print(json.dumps(record))
            continue
        record["layout"] = report["layout"]
        record["step_time_s"] = report["step_time_s"]["mean"]
        if "memory_real" in report:
            record["ranks"] = [{key: row.get(key, 0) for key in RANK_FIELDS}
                               for row in report["memory_real"]["ranks"]]
        print(json.dumps(record))


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))

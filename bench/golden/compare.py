#!/usr/bin/env python3
"""Diffs two directories written by bench/golden/outputs.sh: per command, the keys removed, added and changed.

Volatile values (wall times, what a measured run measured, paths of temporary run directories) are left out of the
comparison; a restructuring should print "same" for every command, or only the keys it meant to add.
Usage: compare.py BEFORE_DIR AFTER_DIR
"""
import json
import pathlib
import re
import sys

import yaml

# Host timings and temporary paths, in every output.
VOLATILE = re.compile(r"(wall|^out$|out_dir|run_dir|path|analyze_s|total_s|check_s|estimated_s|created|date)")
# What a measured run measured (bench, record and what reads their runs): compared by key only.
MEASURED = re.compile(
    r"(_ns$|^cpu_|duration|started|ended|_s$|_ms$|samples|wakeups|sleeps|late|missed|read_errors|jitter|"
    r"^host$|flops|tokens_per_s|mfu|power|energy|temp|spread|fitted|low|high|shift|without|pinned_by|rms|"
    r"_ns_|residuals|time|error|value|measured|predicted|scale|max|half|exponent|active|idle|wait|cluster|gpu|name|description)")
MEASURED_COMMANDS = {"bench-cpu", "record", "merge", "calibrate", "calibrate-cluster", "devices"}


def flatten(value, prefix=""):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from flatten(item, f"{prefix}.{key}" if prefix else key)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from flatten(item, f"{prefix}[{index}]")
    else:
        yield prefix, value


def volatile(path, measured):
    parts = [part for part in re.split(r"[.\[\]]", path) if part]
    return any(VOLATILE.search(part) or (measured and MEASURED.search(part)) for part in parts)


def load(path):
    text = path.read_text()
    try:
        return dict(flatten(yaml.safe_load(text) if path.suffix == ".yaml" else json.loads(text)))
    except (json.JSONDecodeError, yaml.YAMLError):
        return {"<text>": text}


def main():
    before_dir, after_dir = map(pathlib.Path, sys.argv[1:3])
    worst = 0
    for before in sorted([*before_dir.glob("*.json"), *before_dir.glob("*.yaml")]):
        after = after_dir / before.name
        old, new = load(before), load(after)
        measured = before.stem in MEASURED_COMMANDS
        old = {k: (None if volatile(k, measured) else v) for k, v in old.items()}
        new = {k: (None if volatile(k, measured) else v) for k, v in new.items()}
        removed = sorted(set(old) - set(new))
        added = sorted(set(new) - set(old))
        changed = sorted(k for k in set(old) & set(new) if old[k] != new[k])
        rc_file = before.stem.removesuffix("-cluster") + ".rc"
        rc_old = (before_dir / rc_file).read_text().strip()
        rc_new = (after_dir / rc_file).read_text().strip()
        status = "same" if not (removed or added or changed) and rc_old == rc_new else "DIFFERS"
        if removed or changed or rc_old != rc_new:
            worst = 1
        print(f"{before.stem}: {status} (rc {rc_old} -> {rc_new}, {len(old)} values)")
        for label, keys in (("removed", removed), ("added", added), ("changed", changed)):
            shown = sorted({re.sub(r"\[\d+\]", "[]", k) for k in keys})
            if shown:
                print(f"  {label} ({len(keys)}): {', '.join(shown[:12])}{' ...' if len(shown) > 12 else ''}")
            if label == "changed":
                for key in keys[:5]:
                    print(f"    {key}: {old[key]!r} -> {new[key]!r}")
    for before in sorted(before_dir.glob("*.html")):
        strip = re.compile(r"/tmp/[^\s\"<]*|\d{4}-\d\d-\d\d[ T][\d:.]+|generated in [\d.]+ \w+")
        same = strip.sub("", before.read_text()) == strip.sub("", (after_dir / before.name).read_text())
        worst = worst or not same
        print(f"{before.name}: {'same' if same else 'DIFFERS'} (text, temporary paths and dates aside)")
    return worst


if __name__ == "__main__":
    sys.exit(main())

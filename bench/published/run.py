#!/usr/bin/env python3
"""The simulator against published training runs (bench/published/README.md).

Reads every sources/*.yaml, simulates each row with `calo sim` (memory rows: its memory model), and prints
published vs predicted with the error (predicted / published - 1) in the source's own convention, then a
headline: rows within 5 % and 10 % and the median |error|, per kind and per source. Rows calo cannot express
are listed with what is missing, never dropped.

  run.py CALO [--json OUT] [--source NAME ...] [--check EXPECTED] [--record EXPECTED] [--jobs N]

--check fails (exit 1) when a row's error moved by more than 2 points from EXPECTED, when a row became
expressible or stopped being, or when a row was added or removed without --record.
"""
import argparse
import concurrent.futures
import json
import math
import os
import statistics
import subprocess
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CHECK_TOLERANCE = 0.02  # a row may move this much (absolute error, 2 points) before --check fails

# metric -> (kind, unit)
METRICS = {
    "tokens_per_s_per_gpu": ("throughput", "tok/s/GPU"),
    "tflops_per_gpu": ("throughput", "TFLOP/s/GPU"),
    "mfu": ("throughput", "MFU"),
    "iteration_s": ("throughput", "s/step"),
    "time_to_train_min": ("throughput", "min"),
    "memory_gib": ("memory", "GiB/GPU"),
    "memory_reserved_gib": ("memory", "GiB/GPU"),
    "energy_per_step_j": ("energy", "J/step"),
}
FLOP_CONVENTIONS = ("calo", "6n-attention", "megatron", "megatron-core")
LAYOUT_DEFAULTS = {"tp": 1, "pp": 1, "cp": 1, "ep": 1, "vpp": 1, "schedule": "1f1b", "zero": 1,
                   "recompute": "none", "precision": "bf16", "overlap": False, "mbs": 1, "trainer": "default"}
REQUIRED_ROW_FIELDS = ("id", "cite", "host", "model", "gpus", "seq", "gbs", "metric", "published", "convention")


class SourceError(Exception):
    """A source file that does not follow the schema: the message names the file, the row and the fix."""


def load_sources(names):
    """Every sources/*.yaml (or those named), checked against the schema."""
    directory = os.path.join(HERE, "sources")
    files = sorted(f for f in os.listdir(directory) if f.endswith(".yaml"))
    if names:
        wanted = {f"{name}.yaml" for name in names}
        unknown = wanted - set(files)
        if unknown:
            raise SourceError(f"no source {', '.join(sorted(unknown))} in {directory}; have: "
                              f"{', '.join(f[:-5] for f in files)}")
        files = [f for f in files if f in wanted]
    return [check_source(os.path.join(directory, f)) for f in files]


def check_source(path):
    """The parsed source at `path`, or SourceError naming what is wrong."""
    with open(path, encoding="utf-8") as handle:
        source = yaml.safe_load(handle)
    where = os.path.relpath(path, REPO)
    for field in ("source", "title", "url", "commit", "hosts", "rows"):
        if not source.get(field):
            raise SourceError(f"{where}: missing top-level `{field}` (bench/published/README.md)")
    seen = set()
    for index, row in enumerate(source["rows"]):
        label = f"{where}: row {index} ({row.get('id', 'no id')})"
        for field in REQUIRED_ROW_FIELDS:
            if row.get(field) is None:
                raise SourceError(f"{label}: missing `{field}`")
        if row["id"] in seen:
            raise SourceError(f"{label}: id repeated; ids are unique within a source")
        seen.add(row["id"])
        if row["metric"] not in METRICS:
            raise SourceError(f"{label}: metric `{row['metric']}` is none of {', '.join(METRICS)}")
        overlap = row.get("overlap")
        if isinstance(overlap, list) and not set(overlap) <= {"tp", "grad", "param"}:
            raise SourceError(f"{label}: overlap {overlap} names parts other than tp, grad, param")
        if row["host"] not in source["hosts"]:
            raise SourceError(f"{label}: host `{row['host']}` is not under `hosts`")
        if row["metric"] in ("tflops_per_gpu", "mfu") and row.get("flops") not in FLOP_CONVENTIONS:
            raise SourceError(f"{label}: a {row['metric']} row needs `flops`: one of {', '.join(FLOP_CONVENTIONS)}")
        if row["metric"] == "mfu" and not row.get("peak_tflops"):
            raise SourceError(f"{label}: an mfu row needs `peak_tflops` (the peak the source divides by)")
        if row["metric"] == "time_to_train_min" and not row.get("train_samples") and not row.get("missing"):
            raise SourceError(f"{label}: a time_to_train_min row needs `train_samples` (sequences trained)")
        if row["metric"] == "memory_reserved_gib" and not str(row.get("trainer", "")).startswith("torchtitan"):
            raise SourceError(f"{label}: calo models the allocator's reserved peak for the torchtitan trainers only "
                              f"(trainer: torchtitan or torchtitan-eager-loss)")
        if (row.get("evals") is None) != (row.get("eval_tokens") is None):
            raise SourceError(f"{label}: `evals` and `eval_tokens` come together (evaluations in the run and the "
                              f"tokens each one reads)")
    return source


def layout_of(row):
    """The row's layout with the schema's defaults filled in."""
    layout = dict(LAYOUT_DEFAULTS)
    layout.update({key: row[key] for key in LAYOUT_DEFAULTS if row.get(key) is not None})
    return layout


def layout_flags(row, cluster):
    """`calo sim` flags for the row's model, cluster and layout."""
    layout = layout_of(row)
    flags = ["--model", model_of(row["model"]), "--cluster", str(cluster), "--gpus", str(row["gpus"]),
             "--seq", str(row["seq"]), "--gbs", str(row["gbs"]), "--mbs", str(layout["mbs"])]
    for key in ("tp", "pp", "cp", "ep", "vpp", "zero"):
        flags += [f"--{key}", str(layout[key])]
    flags += ["--schedule", str(layout["schedule"]), "--recompute", str(layout["recompute"]),
              "--trainer", str(layout["trainer"]), "--precision", str(layout["precision"])]
    if row.get("layers"):
        flags += ["--layers", str(row["layers"])]
    if row.get("fp8_all_gather"):
        flags += ["--fp8-all-gather"]
    if row.get("attention"):
        flags += ["--attention", str(row["attention"])]
    if row.get("cp_comm"):
        flags += ["--cp-comm", str(row["cp_comm"])]
    return flags + overlap_flags(layout["overlap"])


def overlap_flags(overlap):
    """`overlap: true` overlaps everything calo can (--overlap); a list names the parts: tp, grad, param."""
    if overlap is True:
        return ["--overlap"]
    if not overlap:
        return []
    return [f"--overlap-{part}" for part in overlap]


def cluster_of(source, row, overrides):
    """The preset (a name, or a file under bench/published/clusters) that describes the row's host; `overrides`
    maps a preset to the one simulated instead (--cluster-override)."""
    cluster = source["hosts"][row["host"]].get("cluster")
    cluster = overrides.get(cluster, cluster)
    local = os.path.join(HERE, "clusters", f"{cluster}.yaml")
    return local if os.path.exists(local) else cluster


def eval_steps(row):
    """Evaluation steps of the run: each of its `evals` reads `eval_tokens` in global batches of gbs x seq
    tokens, the last one partly filled (an MLPerf log's validation_step_timing lines count them)."""
    return row["evals"] * math.ceil(row["eval_tokens"] / (row["gbs"] * row["seq"]))


def simulate(calo, flags):
    """`calo sim --json` of the flags: (result, None) or (None, the first line of calo's refusal)."""
    # --allow-oom: the source ran the layout, so it fit; where calo's memory model says otherwise the row is
    # still simulated and the table says so.
    command = [calo, "sim", *flags, "--steps", "1", "--warmup", "0", "--no-store", "--allow-oom", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        message = (done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}").splitlines()
        return None, f"calo sim refused (exit {done.returncode}): {message[0] if message else ''}"
    return json.loads(done.stdout), None


def model_of(model):
    """The model a row names: a file under bench/published/models (shapes only a source uses, with their
    provenance), else calo's stock preset of that name (data/models)."""
    local = os.path.join(HERE, "models", f"{model}.yaml")
    return local if os.path.exists(local) else str(model)


def model_shape(model):
    """The model's YAML (bench/published/models or data/models)."""
    path = model_of(model)
    if path == str(model):
        path = os.path.join(REPO, "data", "models", f"{model}.yaml")
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def flops_per_token(convention, row, result):
    """FLOPs per token under the source's convention (docs/METRICS.md "Published FLOP conventions")."""
    if convention == "calo":
        return result["model_tflops_per_gpu"] * 1e12 / (result["tokens_per_s"] / result["gpus"])
    shape = model_shape(row["model"])
    layers, hidden, vocab, seq = shape["num_layers"], shape["hidden_size"], shape["vocab_size"], row["seq"]
    heads, head_dim = shape["num_attention_heads"], hidden // shape["num_attention_heads"]
    if convention == "6n-attention":  # torchtitan / PaLM: 6 x non-embedding parameters + 12 l h q t
        kv_dim = shape.get("num_kv_heads", heads) * head_dim
        mlp_matrices = 3 if shape.get("activation") in ("swiglu", "geglu") else 2
        per_layer = 2 * hidden * hidden + 2 * hidden * kv_dim + mlp_matrices * hidden * shape["ffn_hidden_size"]
        return 6 * layers * per_layer + 12 * layers * heads * head_dim * seq
    if convention == "megatron-core":  # Megatron-Core r0.8 num_floating_point_operations, per token
        groups = shape.get("num_kv_heads", heads) / heads
        gated = 1.5 if shape.get("activation") in ("swiglu", "geglu") else 1.0
        routed = shape.get("moe_top_k", 2) if shape.get("num_experts") else 1
        return 12 * layers * hidden**2 * ((1 + groups + seq / hidden) + shape["ffn_hidden_size"] / hidden * routed * gated
                                          + vocab / (2 * layers * hidden))
    # megatron: Narayanan et al. 2021 eq. 3 per token, with full recomputation (4 passes): 96 l h^2 (...)
    return 96 * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))


def predict(row, result, evaluation=None):
    """The simulator's figure in the row's metric and convention; `evaluation` is the `calo sim --eval` result
    of a row whose run evaluates (`evals`), whose steps the time to train includes."""
    metric = row["metric"]
    tokens_per_s_per_gpu = result["tokens_per_s"] / result["gpus"]
    if metric == "tokens_per_s_per_gpu":
        return tokens_per_s_per_gpu
    if metric == "tflops_per_gpu":
        return tokens_per_s_per_gpu * flops_per_token(row["flops"], row, result) / 1e12
    if metric == "mfu":
        return tokens_per_s_per_gpu * flops_per_token(row["flops"], row, result) / 1e12 / row["peak_tflops"]
    if metric == "iteration_s":
        return result["iteration_s"]
    if metric == "time_to_train_min":
        eval_s = eval_steps(row) * evaluation["iteration_s"] if evaluation else 0.0
        return (row["train_samples"] / row["gbs"] * result["iteration_s"] + eval_s) / 60
    if metric == "memory_gib":
        return result["memory"]["total_bytes"] / 2**30
    if metric == "memory_reserved_gib":
        return result["memory"]["reserved_bytes"] / 2**30
    return result["energy_per_step_j"]


def evaluate(calo, source, row, overrides):
    """One output row: published, predicted (or null and why), error."""
    kind, unit = METRICS[row["metric"]]
    out = {"source": source["source"], "id": row["id"], "kind": kind, "metric": row["metric"], "unit": unit,
           "published": row["published"], "convention": row["convention"], "predicted": None,
           "error": None, "gpus": row["gpus"], "model": row["model"], "precision": layout_of(row)["precision"]}
    if row.get("missing"):
        out["missing"] = row["missing"]
        return out
    cluster = cluster_of(source, row, overrides)
    flags = layout_flags(row, cluster)
    result, refusal = simulate(calo, flags)
    evaluation = None
    if result is not None and row.get("evals"):
        evaluation, refusal = simulate(calo, flags + ["--eval"])
    if result is None or refusal:
        out["missing"] = refusal
        return out
    out["predicted"] = predict(row, result, evaluation)
    out["error"] = out["predicted"] / row["published"] - 1
    out["cluster"] = os.path.basename(str(cluster)).removesuffix(".yaml")
    out["fits"] = bool(result.get("memory", {}).get("fits", True))
    return out


def headline(rows, label):
    """One line: rows within 5 % and 10 %, median |error|, rows not expressible."""
    errors = [abs(r["error"]) for r in rows if r["error"] is not None]
    missing = sum(1 for r in rows if r["error"] is None)
    if not errors:
        return f"{label}: no expressible rows ({missing} not expressible)"
    within5 = sum(e <= 0.05 for e in errors)
    within10 = sum(e <= 0.10 for e in errors)
    return (f"{label}: {len(errors)} rows, {within5} within 5 %, {within10} within 10 %, median |error| "
            f"{100 * statistics.median(errors):.1f} %, worst {100 * max(errors):.1f} %"
            + (f"; {missing} not expressible" if missing else ""))


def fmt_figure(value):
    """A figure with four significant digits (thousands separated), or a dash for none."""
    if value is None:
        return "—"
    return f"{value:.4g}" if abs(value) < 1000 else f"{value:,.0f}"


def print_table(rows):
    print(f"# {'source/id':<52} {'GPUs':>6} {'metric':<12} {'published':>10} {'predicted':>10} {'error':>8}")
    for r in rows:
        error = f"{100 * r['error']:+.1f} %" if r["error"] is not None else "—"
        print(f"  {r['source'] + '/' + r['id']:<52} {r['gpus']:>6} {r['unit']:<12} {fmt_figure(r['published']):>10} "
              f"{fmt_figure(r['predicted']):>10} {error:>8}")
        if r.get("fits") is False:
            print(f"  {'':<52} calo's memory model says this layout does not fit the card (the source ran it)")
        if r.get("missing"):
            print(f"  {'':<52} not expressible: {r['missing']}")


def print_headlines(rows):
    print("#")
    for kind in ("throughput", "memory", "energy"):
        of_kind = [r for r in rows if r["kind"] == kind]
        if of_kind:
            print("# " + headline(of_kind, kind))
    for source in sorted({r["source"] for r in rows}):
        print("#   " + headline([r for r in rows if r["source"] == source], source))


def check(rows, expected_path):
    """Problems of `rows` against the recorded errors: a list of lines, empty when every row holds."""
    with open(expected_path, encoding="utf-8") as handle:
        expected = {f"{r['source']}/{r['id']}": r for r in json.load(handle)["rows"]}
    problems = []
    current = {f"{r['source']}/{r['id']}": r for r in rows}
    for key in sorted(set(expected) - set(current)):
        problems.append(f"{key}: recorded but no longer in the sources (re-record with --record)")
    for key, row in sorted(current.items()):
        before = expected.get(key)
        if before is None:
            problems.append(f"{key}: new row not recorded (re-record with --record)")
        elif (before["error"] is None) != (row["error"] is None):
            state = "became expressible" if row["error"] is not None else f"is no longer expressible: {row.get('missing')}"
            problems.append(f"{key}: {state} (re-record with --record)")
        elif row["error"] is not None and abs(row["error"] - before["error"]) > CHECK_TOLERANCE:
            problems.append(f"{key}: error {100 * row['error']:+.1f} % moved from the recorded "
                            f"{100 * before['error']:+.1f} % (more than {100 * CHECK_TOLERANCE:.0f} points)")
    return problems


RECORDED_KEYS = ("source", "id", "kind", "published", "predicted", "error", "missing")


def write_rows(path, rows, one_per_line=False):
    """{"rows": rows} as JSON at `path`."""
    with open(path, "w", encoding="utf-8") as handle:
        if one_per_line:
            handle.write('{"rows": [\n' + ",\n".join(json.dumps(row) for row in rows) + "\n]}\n")
        else:
            json.dump({"rows": rows}, handle, indent=1)
            handle.write("\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("calo", help="the calo binary")
    parser.add_argument("--json", help="write {\"rows\": [...]} here")
    parser.add_argument("--source", action="append", default=[], help="only this source (repeatable)")
    parser.add_argument("--check", help="fail when a row moved 2 points from this recorded file")
    parser.add_argument("--record", help="write the rows as the recorded errors to this file")
    parser.add_argument("--cluster-override", action="append", default=[], metavar="PRESET=OTHER",
                        help="simulate rows whose host names PRESET on OTHER (a preset or YAML file; repeatable)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="simulations run at once")
    args = parser.parse_args()
    if not os.access(args.calo, os.X_OK):
        sys.exit(f"run.py: {args.calo} is not an executable calo binary (build it: ./scripts/build.sh)")
    try:
        sources = load_sources(args.source)
    except (SourceError, yaml.YAMLError) as error:
        sys.exit(f"run.py: {error}")
    overrides = dict(item.split("=", 1) for item in args.cluster_override if "=" in item)
    if len(overrides) != len(args.cluster_override):
        sys.exit("run.py: --cluster-override takes PRESET=OTHER, e.g. h100-hgx=h100-hgx-calibrated")
    work = [(source, row) for source in sources for row in source["rows"]]
    print(f"# published runs: {len(work)} rows from {len(sources)} sources; calo {args.calo}; "
          f"error = predicted / published - 1")
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        rows = list(pool.map(lambda item: evaluate(args.calo, *item, overrides), work))
    print_table(rows)
    print_headlines(rows)
    if args.json:
        write_rows(args.json, rows)
    if args.record:  # the recorded figures only, one row a line, so a change reads as a diff of its rows
        write_rows(args.record, [{key: row.get(key) for key in RECORDED_KEYS} for row in rows], one_per_line=True)
    if args.check:
        problems = check(rows, args.check)
        for line in problems:
            print(f"run.py: {line}", file=sys.stderr)
        if problems:
            sys.exit(1)
        print(f"# check: every row within {100 * CHECK_TOLERANCE:.0f} points of {os.path.relpath(args.check)}")


if __name__ == "__main__":
    main()

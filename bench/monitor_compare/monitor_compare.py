#!/usr/bin/env python3
"""What a power monitor costs and how right it is, measured side by side on one GPU (issue 19.5).

A bf16 GEMM load (bench/gpu/gemm_load.py: steady, then 150 ms on / 150 ms off bursts) runs with no monitor, under
`calo record`, under Zeus's PowerMonitor (its defaults, and with a 100 ms period) and under `nvidia-smi -lms 50`,
interleaved over rounds (the order rotates each round). Each monitor runs as its own process beside the job, started
before it and stopped after it, so its whole-process CPU (its threads and the children it reaps) is measured by
wait4(). Per point it reports: the job's TFLOP/s, the monitor's CPU in cores, power values captured per second
inside the job's window, and the energy the monitor's power integrates to over that window against the GPU's own
energy counter (nvmlDeviceGetTotalEnergyConsumption, read at the edges where it ticks, so the window's ends are
known to the millisecond).

  monitor_compare.py --calo PATH [--gpu 0] [--rounds 2] [--seconds 8] [--out DIR] [--conditions a,b,...]

Writes DIR/points.json (every point) and DIR/summary.md (medians per condition and load), and prints the summary.
Never changes a GPU setting."""
import argparse
import datetime
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GEMM_LOAD = os.path.join(HERE, "..", "gpu", "gemm_load.py")
CONDITIONS = ["none", "calo", "zeus", "zeus-100ms", "nvidia-smi"]
NOT_BOARD_POWER = {"zeus_memory_average"}  # Zeus's memory-power domain (HBM only), kept in points.json
LOADS = {"steady": [], "bursty": ["--burst-ms", "150", "--idle-ms", "150"]}


def nvml_energy_edge(handle, nvml, timeout_s=0.5):
    """(unix time, mJ) at the first change of the GPU's energy counter: the counter ticks every few ms to 100 ms,
    so reading it at its edge dates the value to within one poll."""
    first = nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        value = nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        if value != first:
            return time.time(), value
    return time.time(), nvml.nvmlDeviceGetTotalEnergyConsumption(handle)


def integrate_j(samples, begin_s, end_s):
    """Trapezoid integral (J) of (unix s, W) samples over [begin_s, end_s], interpolated at the ends."""
    samples = sorted(samples)
    if len(samples) < 2:
        return float("nan")

    def at(t):
        for (t0, p0), (t1, p1) in zip(samples, samples[1:]):
            if t0 <= t <= t1:
                return p0 if t1 == t0 else p0 + (p1 - p0) * (t - t0) / (t1 - t0)
        return samples[0][1] if t < samples[0][0] else samples[-1][1]

    points = [(begin_s, at(begin_s))] + [s for s in samples if begin_s < s[0] < end_s] + [(end_s, at(end_s))]
    return sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(points, points[1:]))


def start_monitor(condition, args, scratch):
    """Starts the monitor process of a condition; returns (Popen or None, how to read its samples later)."""
    if condition == "none":
        return None, None
    if condition == "calo":
        run_dir = os.path.join(scratch, "calo-run")
        process = subprocess.Popen([args.calo, "record", "--out", run_dir, "--", "sleep", "100000"],
                                   stdout=subprocess.DEVNULL, stderr=open(os.path.join(scratch, "calo.log"), "w"))
        time.sleep(2.0)  # NVML init, query-cost measurement, first samples
        return process, run_dir
    if condition.startswith("zeus"):
        out = os.path.join(scratch, "zeus.json")
        command = [sys.executable, os.path.join(HERE, "zeus_sidecar.py"), "--gpu", str(args.gpu), "--out", out]
        if condition == "zeus-100ms":
            command += ["--update-period-s", "0.1"]
        process = subprocess.Popen(command, env=args.zeus_env, stdout=subprocess.PIPE, stderr=open(os.path.join(scratch, "zeus.log"), "w"),
                                   text=True)
        ready = process.stdout.readline().strip()
        if not ready.startswith("ready"):
            raise RuntimeError(f"zeus monitor did not start: {open(os.path.join(scratch, 'zeus.log')).read()[-2000:]}")
        return process, (out, ready)
    if condition == "nvidia-smi":
        out = os.path.join(scratch, "smi.csv")
        fields = "timestamp,power.draw.instant,power.draw" if args.smi_instant else "timestamp,power.draw"
        process = subprocess.Popen(["nvidia-smi", "-i", str(args.gpu), f"--query-gpu={fields}", "--format=csv,noheader,nounits",
                                    "-lms", "50"], stdout=open(out, "w"), stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        return process, out
    raise ValueError(condition)


def stop_monitor(process):
    """SIGTERM, then wait4: the monitor's whole-process CPU seconds (user + system, children it reaped included)."""
    process.send_signal(signal.SIGTERM)
    _, _, usage = os.wait4(process.pid, 0)
    process.returncode = 0
    return usage.ru_utime + usage.ru_stime


def calo_samples(run_dir):
    """(unix s, W) of the driver's own power samples in a calo run, and of the polled instant power."""
    db = sqlite3.connect(os.path.join(run_dir, "run.db"))
    offset_ns = db.execute("SELECT wall_offset_ns FROM run").fetchone()[0]
    series = {}
    for metric in ("power_sampled_w", "power_instant_w"):
        rows = db.execute("SELECT s.t_ns, s.value FROM sample s JOIN metric m ON m.id = s.metric_id "
                          "WHERE m.name = ? ORDER BY s.t_ns", (metric,)).fetchall()
        series[metric] = [((offset_ns + t) / 1e9, v) for t, v in rows]
    return series


def smi_samples(path):
    """(unix s, W) rows of nvidia-smi's CSV (local-time timestamps), the first power column."""
    rows = []
    for line in open(path):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 2:
            continue
        try:
            stamp = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            rows.append((stamp, float(parts[1])))
        except ValueError:
            continue
    return rows


def samples_of(condition, handle_info):
    """{series name: [(unix s, W)]} a monitor captured."""
    if condition == "calo":
        return calo_samples(handle_info)
    if condition.startswith("zeus"):
        data = json.load(open(handle_info[0]))
        return {f"zeus_{domain}": [tuple(x) for x in rows] for domain, rows in data["timelines"].items()}
    if condition == "nvidia-smi":
        return {"smi_power": smi_samples(handle_info)}
    return {}


def run_point(condition, load, args, nvml, handle):
    """One job under one monitor: the job's speed, the monitor's CPU and its energy error over the job's window."""
    with tempfile.TemporaryDirectory(prefix=f"mc-{condition}-") as scratch:
        started_s = time.time()
        process, info = start_monitor(condition, args, scratch)
        begin_s, begin_mj = nvml_energy_edge(handle, nvml)
        job = subprocess.run([sys.executable, GEMM_LOAD, "--device", str(args.gpu), "--seconds", str(args.seconds)]
                             + LOADS[load], capture_output=True, text=True, env=args.job_env)
        end_s, end_mj = nvml_energy_edge(handle, nvml)
        point = {"condition": condition, "load": load, "job_rc": job.returncode,
                 "window_s": end_s - begin_s, "counter_energy_j": (end_mj - begin_mj) / 1e3}
        if "TFLOP/s" in job.stdout:
            point["tflops"] = float(job.stdout.strip().split("=")[-1].split()[0])
        else:
            point["job_error"] = (job.stdout + job.stderr)[-1500:]
        if process is None:
            return point
        time.sleep(1.2)  # let buffered samples (calo's 1 s driver-sample reads) land
        cpu_s = stop_monitor(process)
        point["monitor_cpu_s"] = cpu_s
        point["monitor_alive_s"] = time.time() - started_s
        point["monitor_cpu_cores"] = cpu_s / point["monitor_alive_s"]
        if condition.startswith("zeus"):
            point["zeus_ready_line"] = info[1]
        try:
            for name, samples in samples_of(condition, info).items():
                inside = [s for s in samples if begin_s <= s[0] <= end_s]
                energy_j = integrate_j(samples, begin_s, end_s)
                point[f"{name}.values_per_s"] = len(inside) / point["window_s"]
                point[f"{name}.energy_j"] = energy_j
                point[f"{name}.energy_error_pct"] = 100 * (energy_j / point["counter_energy_j"] - 1)
                point[f"{name}.peak_w"] = max((w for _, w in inside), default=float("nan"))
        except Exception as error:  # a monitor that wrote nothing usable is a finding, not a crash of the bench
            point["samples_error"] = repr(error)
            for log in ("calo.log", "zeus.log"):
                path = os.path.join(scratch, log)
                if os.path.exists(path):
                    point[f"{log}"] = open(path).read()[-1500:]
        return point


def summarize(points):
    """Markdown table: medians per (condition, load) and the slowdown against no monitor."""
    def median(rows, key):
        values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
        return statistics.median(values) if values else float("nan")

    lines = ["| load | monitor | TFLOP/s | slowdown | monitor CPU (cores) | series | values/s | energy error | peak W |",
             "| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
    for load in LOADS:
        base = median([p for p in points if p["load"] == load and p["condition"] == "none"], "tflops")
        for condition in dict.fromkeys(p["condition"] for p in points):
            rows = [p for p in points if p["load"] == load and p["condition"] == condition]
            if not rows:
                continue
            tflops = median(rows, "tflops")
            slowdown = 100 * (base / tflops - 1) if tflops == tflops and base == base else float("nan")
            series = sorted({k.split(".")[0] for r in rows for k in r if k.endswith(".energy_j")}) or ["-"]
            for name in series:
                if name in NOT_BOARD_POWER:  # a component's power: its integral is not the board's energy
                    continue
                lines.append(f"| {load} | {condition} | {tflops:.1f} | {slowdown:+.2f} % | "
                             f"{median(rows, 'monitor_cpu_cores'):.4f} | {name} | "
                             f"{median(rows, name + '.values_per_s'):.1f} | "
                             f"{median(rows, name + '.energy_error_pct'):+.2f} % | {median(rows, name + '.peak_w'):.0f} |")
    return "\n".join(lines) + (f"\n\n{len(points)} points; medians over rounds. Slowdown: TFLOP/s without a monitor ÷ "
                                "with it − 1. Energy error: the series' trapezoid integral over the job's window ÷ the "
                                "GPU energy counter's increase − 1.\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calo", default="", help="the calo binary (required unless --from-points)")
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--out", default="monitor-compare-out")
    parser.add_argument("--conditions", default=",".join(CONDITIONS))
    parser.add_argument("--pylib", default="", help="directory with Zeus and its dependencies (bench/monitor_compare/stage.sh)")
    parser.add_argument("--budget-s", type=float, default=520, help="stop starting points after this long")
    parser.add_argument("--from-points", default="", help="only re-summarize a points.json of an earlier run")
    args = parser.parse_args()
    if args.from_points:
        print(summarize(json.load(open(args.from_points))))
        return 0
    if not args.calo:
        print("monitor_compare: --calo PATH is required (the calo binary, e.g. build/calo)", file=sys.stderr)
        return 2
    conditions = args.conditions.split(",")
    unknown = [c for c in conditions if c not in CONDITIONS]
    if unknown:
        print(f"monitor_compare: unknown condition(s) {unknown}; valid: {','.join(CONDITIONS)}", file=sys.stderr)
        return 2
    args.job_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    args.zeus_env = dict(args.job_env, PYTHONPATH=args.pylib) if args.pylib else args.job_env
    if args.pylib:
        sys.path.append(args.pylib)
    import pynvml as nvml  # nvidia-ml-py (carried with Zeus's wheels)

    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(args.gpu)
    args.smi_instant = subprocess.run(["nvidia-smi", "-i", str(args.gpu), "--query-gpu=power.draw.instant",
                                       "--format=csv,noheader"], capture_output=True).returncode == 0
    os.makedirs(args.out, exist_ok=True)
    points, begun = [], time.time()
    for round_index in range(args.rounds):
        order = conditions[round_index % len(conditions):] + conditions[:round_index % len(conditions)]
        for load in LOADS:
            for condition in order:
                if time.time() - begun > args.budget_s:
                    print(f"budget of {args.budget_s:.0f} s used: stopping before round {round_index} {load} {condition}")
                    break
                point = run_point(condition, load, args, nvml, handle)
                point["round"] = round_index
                points.append(point)
                print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in point.items()
                                  if not k.endswith(".log")}), flush=True)
                json.dump(points, open(os.path.join(args.out, "points.json"), "w"), indent=1)
    summary = summarize(points)
    open(os.path.join(args.out, "summary.md"), "w").write(summary)
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())

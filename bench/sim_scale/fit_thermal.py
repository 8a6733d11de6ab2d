#!/usr/bin/env python3
"""Fits the two-node thermal RC model of docs/SIMULATOR.md to the 4xH200 NVML fixture.

Model per GPU (explicit Euler on the recorded sample times, input = recorded instantaneous power P(t)):
    dT_sink/dt = (inlet + P*R_sink - T_sink) / tau_sink
    dT_die/dt  = (T_sink + P*R_die - T_die) / tau_die
Steady state: T = inlet + P*(R_die + R_sink). Fitted by grid search (least squares on gpu_temp_c) over
R_total, the die share of R, tau_die, tau_sink and the inlet temperature. Pure Python, no dependencies.
Usage: fit_thermal.py [tests/fixtures/h200x4-nvml-phases/nvml_trace.csv.gz]  (default: that fixture)
"""
import collections
import os
import csv
import gzip
import sys

default_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures",
                            "h200x4-nvml-phases", "nvml_trace.csv.gz")
path = sys.argv[1] if len(sys.argv) > 1 else default_path
rows_by_gpu = collections.defaultdict(list)
with gzip.open(path, "rt") as handle:
    for row in csv.DictReader(handle):
        if row["phase"] in ("setup", "done") or not row["power_instant_mw"] or not row["gpu_temp_c"]:
            continue
        rows_by_gpu[int(row["gpu"])].append(
            (float(row["t"]), float(row["power_instant_mw"]) / 1000.0, float(row["gpu_temp_c"])))


def simulate(samples, inlet_c, r_die, r_sink, tau_die_s, tau_sink_s):
    t_prev, power_w, temp_c = samples[0]
    sink_c = temp_c - power_w * r_die  # start from the first measured die temperature
    die_c = temp_c
    error = 0.0
    for t_s, power_w, measured_c in samples[1:]:
        dt_s = t_s - t_prev
        t_prev = t_s
        sink_c += (inlet_c + power_w * r_sink - sink_c) * min(1.0, dt_s / tau_sink_s)
        die_c += (sink_c + power_w * r_die - die_c) * min(1.0, dt_s / tau_die_s)
        error += (die_c - measured_c) ** 2
    return (error / (len(samples) - 1)) ** 0.5


print("# gpu  inlet_c  r_total_k_per_w  r_die  r_sink  tau_die_s  tau_sink_s  rms_c")
for gpu, samples in sorted(rows_by_gpu.items()):
    samples = samples[::2]  # ~50 ms steps keep the fit fast
    best = None
    for r_total in [0.030 + 0.001 * step for step in range(22)]:
        for die_share in (0.3, 0.4, 0.5, 0.6, 0.7):
            for tau_die in (0.1, 0.2, 0.4):
                for tau_sink in (2, 3, 4, 6, 10):
                    for inlet in (29.0, 30.0, 31.0, 32.0, 33.0):
                        rms = simulate(samples, inlet, r_total * die_share, r_total * (1 - die_share), tau_die,
                                       tau_sink)
                        if best is None or rms < best[0]:
                            best = (rms, inlet, r_total, die_share, tau_die, tau_sink)
    rms, inlet, r_total, die_share, tau_die, tau_sink = best
    print(f"{gpu}  {inlet:.1f}  {r_total:.3f}  {r_total * die_share:.4f}  {r_total * (1 - die_share):.4f}  "
          f"{tau_die}  {tau_sink}  {rms:.2f}")

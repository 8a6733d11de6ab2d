#!/usr/bin/env python3
"""Checks `power_sampled_w` (the driver's own power samples) in a recorded run against the other power figures.

    check_power_samples.py RUN_DIR_OR_DB

Per GPU: how many samples, their rate and spacing, and the energy they integrate to over the span they cover,
beside the energy counter's delta over the same span (the driver's energy counter is the reference) and the
same integral of the polled `power_instant_w`. Needs only the Python standard library.
"""
import os
import sqlite3
import statistics
import sys


def series(db, device, metric_id):
    return db.execute(
        "select t_ns, value from sample where device_idx = ? and metric_id = ? order by t_ns", (device, metric_id)
    ).fetchall()


def integral_j(points, t0, t1):
    inside = [(t, v) for t, v in points if t0 <= t <= t1]
    return sum((b[0] - a[0]) * 1e-9 * 0.5 * (a[1] + b[1]) for a, b in zip(inside, inside[1:]))


def counter_at(points, t):
    for (ta, va), (tb, vb) in zip(points, points[1:]):
        if ta <= t <= tb:
            return va + (vb - va) * (t - ta) / (tb - ta) if tb > ta else va
    return points[0][1] if t < points[0][0] else points[-1][1]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    db = sqlite3.connect(os.path.join(path, "run.db") if os.path.isdir(path) else path)
    metric = dict(db.execute("select name, id from metric"))
    if "power_sampled_w" not in metric:
        print("power_sampled_w: not in this run (driver without nvmlDeviceGetSamples power samples?)")
        return 1
    for (device,) in db.execute("select idx from device where kind = 'gpu' order by idx").fetchall():
        sampled = series(db, device, metric["power_sampled_w"])
        if len(sampled) < 3:
            print(f"gpu{device}: {len(sampled)} power samples")
            continue
        t0, t1 = sampled[0][0], sampled[-1][0]
        spacing_ms = sorted((b[0] - a[0]) / 1e6 for a, b in zip(sampled, sampled[1:]))
        line = (
            f"gpu{device}: power_sampled_w {len(sampled)} samples over {(t1 - t0) / 1e9:.2f} s "
            f"({(len(sampled) - 1) / ((t1 - t0) / 1e9):.1f}/s), spacing p50 {statistics.median(spacing_ms):.2f} ms "
            f"max {spacing_ms[-1]:.2f} ms, mean {statistics.fmean(v for _, v in sampled):.1f} W, "
            f"max {max(v for _, v in sampled):.1f} W; integral {integral_j(sampled, t0, t1):.1f} J"
        )
        if "energy_j" in metric:
            energy = series(db, device, metric["energy_j"])
            if len(energy) >= 2:
                line += f", energy counter {counter_at(energy, t1) - counter_at(energy, t0):.1f} J"
        if "power_instant_w" in metric:
            instant = series(db, device, metric["power_instant_w"])
            changes = sum(1 for a, b in zip(instant, instant[1:]) if a[1] != b[1])
            line += (
                f"; power_instant_w {len(instant)} reads, {changes} changes, max "
                f"{max(v for _, v in instant):.1f} W, integral {integral_j(instant, t0, t1):.1f} J"
            )
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

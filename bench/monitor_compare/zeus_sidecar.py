#!/usr/bin/env python3
"""Runs Zeus's PowerMonitor on one GPU as a monitor process of its own, the way a training script would hold one,
until SIGTERM; then writes every power timeline it captured as JSON (unix seconds, W) and exits.

  zeus_sidecar.py --gpu 0 --out timelines.json [--update-period-s P]   (no P: Zeus's default, inferred)

Prints 'ready period=<s>' on stdout once the monitor runs, so the caller can start the job after it."""
import argparse
import json
import signal
import sys
import threading


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--out", required=True)
    parser.add_argument("--update-period-s", type=float, default=None)
    args = parser.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    from zeus.monitor.power import PowerMonitor  # imported here: its import time is part of the monitor's cost

    monitor = PowerMonitor(gpu_indices=[args.gpu], update_period=args.update_period_s)
    print(f"ready period={monitor.update_period}", flush=True)
    while not stop.wait(0.5):
        pass
    timelines = monitor.get_all_power_timelines(gpu_index=args.gpu)
    monitor.stop()
    with open(args.out, "w") as file:
        json.dump({"update_period_s": monitor.update_period,
                   "timelines": {domain: by_gpu.get(args.gpu, []) for domain, by_gpu in timelines.items()}}, file)
    return 0


if __name__ == "__main__":
    sys.exit(main())

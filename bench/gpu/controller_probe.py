#!/usr/bin/env python3
"""Power-cap controller probe for one GPU: bf16 GEMM bursts of known lengths between idle gaps, for `calo record`.

The preset's runs do not pin the controller's response and averaging times (docs/SIMULATOR.md, Known limits,
"Why mbs4"): how far a burst's 20 ms driver samples overshoot the cap against the burst's length does. Phase
"isolated": bursts of 10-640 ms, each after a gap long enough for the controller to settle at idle, lengths
interleaved so that heat drifts over all of them alike. Phase "train": bursts and short gaps repeated, the dip
before a burst that sets how far the clock has risen (mbs4's pattern).

Each burst prints one line when it ends, for `calo record --markers 'regex:^burst (\\d+)'`:
  burst N phase P target_ms L gap_ms G begin_ns B end_ns E gemms K
with wall-clock (time.time_ns) begin and end of the GPU work (synchronized)."""
import argparse
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--size", type=int, default=8192, help="square GEMM size (bf16)")
parser.add_argument("--repeats", type=int, default=6, help="isolated bursts per length")
parser.add_argument("--gap-ms", type=float, default=400, help="idle gap after an isolated burst")
parser.add_argument("--train-s", type=float, default=3.0, help="length of each burst train")
args = parser.parse_args()

ISOLATED_MS = [10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640]
TRAINS = [(40, 20), (80, 40), (160, 20), (20, 20)]  # (burst ms, gap ms)

a = torch.rand(args.size, args.size, device="cuda", dtype=torch.bfloat16) * 2 - 1
b = torch.rand(args.size, args.size, device="cuda", dtype=torch.bfloat16) * 2 - 1
c = torch.empty_like(a)
for _ in range(10):
    torch.matmul(a, b, out=c)
torch.cuda.synchronize()
# One GEMM's time at full clock, to size the last batch of a burst (bursts end by wall time: the clock falls
# under the cap in long ones).
start = time.perf_counter()
for _ in range(20):
    torch.matmul(a, b, out=c)
torch.cuda.synchronize()
gemm_s = (time.perf_counter() - start) / 20
print(f"probe size {args.size}: one GEMM {gemm_s * 1e3:.3f} ms", flush=True)
time.sleep(2.0)  # settle at idle

count = 0


def burst(phase, target_ms, gap_ms):
    """GEMMs until target_ms of GPU work has passed (2 GEMMs per synchronize), then the idle gap."""
    global count
    gemms = 0
    begin_ns = time.time_ns()
    deadline = time.perf_counter() + target_ms / 1e3
    while True:
        batch = max(1, min(2, int((deadline - time.perf_counter()) / gemm_s + 0.5)))
        for _ in range(batch):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
        gemms += batch
        if time.perf_counter() + 0.5 * gemm_s >= deadline:
            break
    end_ns = time.time_ns()
    count += 1
    print(f"burst {count} phase {phase} target_ms {target_ms} gap_ms {gap_ms} begin_ns {begin_ns} "
          f"end_ns {end_ns} gemms {gemms}", flush=True)
    time.sleep(gap_ms / 1e3)


for _ in range(args.repeats):
    for length_ms in ISOLATED_MS:
        burst("isolated", length_ms, args.gap_ms)
for burst_ms, gap_ms in TRAINS:
    until = time.perf_counter() + args.train_s
    while time.perf_counter() < until:
        burst("train", burst_ms, gap_ms)
    time.sleep(args.gap_ms / 1e3)
print(f"probe done: {count} bursts", flush=True)

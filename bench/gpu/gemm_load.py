#!/usr/bin/env python3
"""bf16 GEMM load for one GPU with PyTorch (fallback of gemm_load.cu when that binary cannot run here).
Prints the same line as gemm_load: 'gemm_load device D size N: G gemms in T s = X TFLOP/s'."""
import argparse
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--device", type=int, default=0)
parser.add_argument("--size", type=int, default=8192)
parser.add_argument("--seconds", type=float, default=10)
parser.add_argument("--burst-ms", type=float, default=0, help="with --idle-ms: GEMMs for this long, then sleep")
parser.add_argument("--idle-ms", type=float, default=0)
args = parser.parse_args()
bursty = args.burst_ms > 0 and args.idle_ms > 0
torch.cuda.set_device(args.device)
a = torch.rand(args.size, args.size, device="cuda", dtype=torch.bfloat16) * 2 - 1
b = torch.rand(args.size, args.size, device="cuda", dtype=torch.bfloat16) * 2 - 1
c = torch.empty_like(a)
for _ in range(20):
    torch.matmul(a, b, out=c)
torch.cuda.synchronize()
begin = time.perf_counter()
gemms = 0
elapsed = 0.0
burst_begin = begin
while elapsed < args.seconds:
    batch = 2 if bursty else 10
    for _ in range(batch):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    gemms += batch
    if bursty and (time.perf_counter() - burst_begin) * 1e3 >= args.burst_ms:
        time.sleep(args.idle_ms / 1e3)
        burst_begin = time.perf_counter()
    elapsed = time.perf_counter() - begin
tflops = 2.0 * args.size ** 3 * gemms / elapsed / 1e12
print(f"gemm_load device {args.device} size {args.size}: {gemms} gemms in {elapsed:.3f} s = {tflops:.2f} TFLOP/s",
      flush=True)

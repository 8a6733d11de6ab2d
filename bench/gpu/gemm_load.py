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
args = parser.parse_args()
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
while elapsed < args.seconds:
    for _ in range(10):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    gemms += 10
    elapsed = time.perf_counter() - begin
tflops = 2.0 * args.size ** 3 * gemms / elapsed / 1e12
print(f"gemm_load device {args.device} size {args.size}: {gemms} gemms in {elapsed:.3f} s = {tflops:.2f} TFLOP/s",
      flush=True)

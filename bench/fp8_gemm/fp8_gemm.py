#!/usr/bin/env python3
"""FP8 against bf16 GEMMs on one GPU: rate and power by shape (issue 63, the simulator's FP8 line).

For each shape (m, n, k) it runs back-to-back GEMMs for --seconds in three precisions on the same GPU:
bf16 (torch.mm), FP8 tensorwise (torch._scaled_mm, e4m3 operands, one fp32 scale each, bf16 output, fp32
accumulation: what torchao's default float8 recipe launches) and FP8 rowwise (a scale per row of A and per
column of B). It reads the GPU's energy counter before and after each window (mean power = energy / time) and
samples the SM clock every 20 ms through NVML (libnvidia-ml via ctypes, nothing to install), so a figure can be
normalised to the maximum clock as the simulator's parameters are. Then it checks each FP8 GEMM against a
float64 reference of the same quantised operands (the GEMM itself must be exact to fp32 accumulation and a
bf16 rounding of the output) and against the unquantised product (e4m3 rounding: 2^-4 relative per operand).

  python3 bench/fp8_gemm/fp8_gemm.py [--seconds 3] [--json OUT]

Never changes clocks or power limits: it measures the card as it is.
"""
import argparse
import ctypes
import json
import sys
import threading
import time

import torch

SHAPES = [  # Llama3-8B's linears at 8192 tokens (mbs 1, seq 8192, tp 1) and smaller tiles of the same
    ("qkv.fwd", 8192, 6144, 4096),
    ("proj.fwd", 8192, 4096, 4096),
    ("fc1.fwd", 8192, 28672, 4096),
    ("fc2.fwd", 8192, 4096, 14336),
    ("fc1.wgrad", 4096, 28672, 8192),
    ("proj.2k", 2048, 4096, 4096),
    ("proj.1k", 1024, 4096, 4096),
    ("proj.512", 512, 4096, 4096),
    ("fc2.tp8", 8192, 4096, 1792),
]
E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0


class Nvml:
    """The few NVML calls the measurement needs (energy counter, SM clock, name, limits)."""

    def __init__(self, index):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        self.check(self.lib.nvmlInit_v2())
        self.handle = ctypes.c_void_p()
        self.check(self.lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(self.handle)))

    @staticmethod
    def check(status):
        if status != 0:
            raise RuntimeError(f"NVML call failed with status {status}")

    def energy_mj(self):
        value = ctypes.c_ulonglong()
        self.check(self.lib.nvmlDeviceGetTotalEnergyConsumption(self.handle, ctypes.byref(value)))
        return value.value

    def sm_mhz(self):
        value = ctypes.c_uint()
        self.check(self.lib.nvmlDeviceGetClockInfo(self.handle, 1, ctypes.byref(value)))  # NVML_CLOCK_SM
        return value.value

    def max_sm_mhz(self):
        value = ctypes.c_uint()
        self.check(self.lib.nvmlDeviceGetMaxClockInfo(self.handle, 1, ctypes.byref(value)))
        return value.value

    def power_limit_w(self):
        value = ctypes.c_uint()
        self.check(self.lib.nvmlDeviceGetEnforcedPowerLimit(self.handle, ctypes.byref(value)))
        return value.value / 1000.0


def operands(precision, m, n, k):
    """A (m x k) and B (k x n, column-major as cuBLASLt wants it) with their scales, and the call."""
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    if precision == "bf16":
        return (lambda: torch.mm(a, b)), a, b, None
    if precision == "fp8-tensorwise":
        scale_a = (E4M3_MAX / a.abs().max().float()).reciprocal()
        scale_b = (E4M3_MAX / b.abs().max().float()).reciprocal()
    else:  # rowwise: one scale per row of A, per column of B
        scale_a = (E4M3_MAX / a.abs().amax(dim=1, keepdim=True).float()).reciprocal()
        scale_b = (E4M3_MAX / b.abs().amax(dim=0, keepdim=True).float()).reciprocal()
    a8 = (a.float() / scale_a).to(E4M3).contiguous()
    b8 = (b.float() / scale_b).to(E4M3).t().contiguous().t()  # column-major, as cuBLASLt's FP8 GEMM needs
    call = lambda: torch._scaled_mm(a8, b8, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)
    return call, a, b, (a8, b8, scale_a, scale_b)


def check_fp8(call, a, b, quantised):
    """Errors of the FP8 GEMM: against float64 on the quantised operands, and against the bf16 inputs."""
    a8, b8, scale_a, scale_b = quantised
    rows = slice(0, 256)
    got = call()[rows].double()
    exact = (a8[rows].double() * scale_a[rows].double() if scale_a.dim() else a8[rows].double() * scale_a.double())
    exact = exact @ (b8.double() * scale_b.double())
    unquantised = a[rows].double() @ b.double()
    scale = exact.abs().mean().item()
    return {"gemm_rel_err": (got - exact).abs().max().item() / scale,
            "quantisation_rel_err": (got - unquantised).abs().mean().item() / unquantised.abs().mean().item()}


def measure(nvml, precision, name, m, n, k, seconds):
    """One window of back-to-back GEMMs: TFLOP/s, mean power, mean SM clock."""
    call, a, b, quantised = operands(precision, m, n, k)
    for _ in range(20):
        call()
    torch.cuda.synchronize()
    clocks, stop = [], threading.Event()

    def sample():
        while not stop.is_set():
            clocks.append(nvml.sm_mhz())
            time.sleep(0.02)

    # Warm the card for a second so the clock and power settle, then measure.
    end = time.time() + 1.0
    while time.time() < end:
        call()
    torch.cuda.synchronize()
    sampler = threading.Thread(target=sample)
    sampler.start()
    energy_begin, started, count = nvml.energy_mj(), time.perf_counter(), 0
    while time.perf_counter() - started < seconds:
        for _ in range(10):
            call()
        count += 10
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - started
    energy_j = (nvml.energy_mj() - energy_begin) / 1000.0
    stop.set()
    sampler.join()
    row = {"shape": name, "m": m, "n": n, "k": k, "precision": precision, "gemms": count,
           "seconds": elapsed, "tflops": 2.0 * m * n * k * count / elapsed / 1e12,
           "mean_power_w": energy_j / elapsed, "mean_sm_mhz": sum(clocks) / max(1, len(clocks))}
    if quantised is not None:
        row.update(check_fp8(call, a, b, quantised))
    del a, b, quantised
    torch.cuda.empty_cache()
    return row


def idle_power(nvml, seconds=2.0):
    """Mean power with nothing running (clocks as the driver leaves them)."""
    torch.cuda.synchronize()
    time.sleep(0.5)
    begin, started = nvml.energy_mj(), time.perf_counter()
    time.sleep(seconds)
    return (nvml.energy_mj() - begin) / 1000.0 / (time.perf_counter() - started)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0, help="measured seconds per shape and precision")
    parser.add_argument("--json", help="write the rows and the device here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("fp8_gemm.py: no CUDA device; run it on a GPU host")
    nvml = Nvml(torch.cuda.current_device())
    device = {"name": torch.cuda.get_device_name(), "max_sm_mhz": nvml.max_sm_mhz(),
              "power_limit_w": nvml.power_limit_w(), "torch": torch.__version__,
              "idle_power_w": idle_power(nvml)}
    print(f"# fp8_gemm: {device['name']}, power limit {device['power_limit_w']:.0f} W, max SM "
          f"{device['max_sm_mhz']} MHz, idle {device['idle_power_w']:.1f} W, torch {device['torch']}")
    print(f"# {'shape':<10} {'m':>6} {'n':>6} {'k':>6} {'precision':<15} {'TFLOP/s':>8} {'W':>6} {'MHz':>6} "
          f"{'gemm err':>9} {'quant err':>9}")
    rows = []
    for name, m, n, k in SHAPES:
        for precision in ("bf16", "fp8-tensorwise", "fp8-rowwise"):
            row = measure(nvml, precision, name, m, n, k, args.seconds)
            rows.append(row)
            errors = (f"{row['gemm_rel_err']:9.2e} {row['quantisation_rel_err']:9.2e}"
                      if "gemm_rel_err" in row else f"{'':>9} {'':>9}")
            print(f"  {name:<10} {m:>6} {n:>6} {k:>6} {precision:<15} {row['tflops']:8.1f} "
                  f"{row['mean_power_w']:6.1f} {row['mean_sm_mhz']:6.0f} {errors}", flush=True)
    big = [r for r in rows if r["shape"] == "fc1.fwd"]
    by = {r["precision"]: r for r in big}
    print(f"# headline (fc1.fwd 8192x28672x4096): fp8 tensorwise {by['fp8-tensorwise']['tflops']:.0f} TFLOP/s "
          f"= {by['fp8-tensorwise']['tflops'] / by['bf16']['tflops']:.2f}x bf16 at "
          f"{by['fp8-tensorwise']['mean_power_w']:.0f} W vs {by['bf16']['mean_power_w']:.0f} W")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"device": device, "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main()

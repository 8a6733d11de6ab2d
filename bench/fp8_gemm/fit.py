#!/usr/bin/env python3
"""The simulator's FP8 GEMM line from a fp8_gemm.py measurement, as ratios to the bf16 GEMMs of the same run.

On each large shape (the Llama3-8B linears at 8192 tokens) of one card, both precisions run power-capped, so
each is normalised to the maximum SM clock the way the simulator's parameters are defined (docs/SIMULATOR.md):
  efficiency at max clock   e = TFLOP/s / (peak x f / f_max)                  (peak: bf16 or FP8 dense)
  active power at max clock A = (P - P_idle) / (f / f_max)^gamma               (gamma: the preset's exponent)
The FP8 figures enter the preset as ratios to the bf16 ones measured beside them, applied to the preset's
fitted bf16 figures (gemm_max, active_power_w.gemm), so the clock sampling's bias cancels:
  gemm_fp8_max          = gemm_max x mean(e_fp8_tensorwise / e_bf16)
  gemm_fp8_rowwise_max  = gemm_max x mean(e_fp8_rowwise / e_bf16)
  active_power_w.gemm_fp8 = active_power_w.gemm x mean(A_fp8 / A_bf16)   (both scalings pooled)

  fit.py MEASUREMENT.json PRESET.yaml [--check]   (--check: exit 1 unless the preset holds these figures)
"""
import argparse
import json
import statistics
import sys

import yaml

LARGE_SHAPES = ("qkv.fwd", "proj.fwd", "fc1.fwd", "fc2.fwd", "fc1.wgrad")
TOLERANCE = 0.005  # --check: relative difference allowed between the preset and the fit (its rounding)


def normalised(row, device, peak_tflops, gamma):
    """(efficiency at max clock, active power at max clock) of one measured row."""
    clock_ratio = row["mean_sm_mhz"] / device["max_sm_mhz"]
    efficiency = row["tflops"] / (peak_tflops * clock_ratio)
    active_w = (row["mean_power_w"] - device["idle_power_w"]) / clock_ratio**gamma
    return efficiency, active_w


def fit(measurement, preset):
    """The three FP8 figures and the per-shape ratios they come from."""
    gpu = preset["gpu"]
    device, gamma = measurement["device"], gpu["clock_power_exponent"]
    peaks = {"bf16": gpu["peak_bf16_tflops"], "fp8-tensorwise": gpu["peak_fp8_tflops"],
             "fp8-rowwise": gpu["peak_fp8_tflops"]}
    by_shape = {}
    for row in measurement["rows"]:
        if row["shape"] in LARGE_SHAPES:
            by_shape.setdefault(row["shape"], {})[row["precision"]] = normalised(
                row, device, peaks[row["precision"]], gamma)
    ratios = {"tensorwise_efficiency": [], "rowwise_efficiency": [], "power": []}
    for shape, rows in sorted(by_shape.items()):
        bf16_efficiency, bf16_w = rows["bf16"]
        ratios["tensorwise_efficiency"].append(rows["fp8-tensorwise"][0] / bf16_efficiency)
        ratios["rowwise_efficiency"].append(rows["fp8-rowwise"][0] / bf16_efficiency)
        ratios["power"] += [rows["fp8-tensorwise"][1] / bf16_w, rows["fp8-rowwise"][1] / bf16_w]
    gemm_max, gemm_w = gpu["efficiency"]["gemm_max"], gpu["active_power_w"]["gemm"]
    figures = {
        "gemm_fp8_max": gemm_max * statistics.mean(ratios["tensorwise_efficiency"]),
        "gemm_fp8_rowwise_max": gemm_max * statistics.mean(ratios["rowwise_efficiency"]),
        "active_power_w.gemm_fp8": gemm_w * statistics.mean(ratios["power"]),
    }
    return figures, ratios


def preset_figures(preset):
    """The preset's FP8 figures, None where absent."""
    gpu = preset["gpu"]
    return {"gemm_fp8_max": gpu["efficiency"].get("gemm_fp8_max"),
            "gemm_fp8_rowwise_max": gpu["efficiency"].get("gemm_fp8_rowwise_max"),
            "active_power_w.gemm_fp8": gpu["active_power_w"].get("gemm_fp8")}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("measurement")
    parser.add_argument("preset")
    parser.add_argument("--check", action="store_true", help="exit 1 unless the preset holds the fit")
    args = parser.parse_args()
    with open(args.measurement, encoding="utf-8") as handle:
        measurement = json.load(handle)
    with open(args.preset, encoding="utf-8") as handle:
        preset = yaml.safe_load(handle)
    figures, ratios = fit(measurement, preset)
    print(f"# FP8 GEMM line of {measurement['device']['name']} against {args.preset} (bf16 ratios over "
          f"{len(ratios['tensorwise_efficiency'])} shapes)")
    for name, values in ratios.items():
        print(f"#   {name} ratio: mean {statistics.mean(values):.4f}, min {min(values):.4f}, max {max(values):.4f}")
    held = preset_figures(preset)
    wrong = []
    for name, value in figures.items():
        print(f"  {name}: {value:.4g} (preset: {held[name]})")
        if held[name] is None or abs(held[name] / value - 1) > TOLERANCE:
            wrong.append(name)
    if args.check and wrong:
        sys.exit(f"fit.py: {args.preset} does not hold the fitted {', '.join(wrong)}; write the figures above")


if __name__ == "__main__":
    main()

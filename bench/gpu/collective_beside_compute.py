#!/usr/bin/env python3
"""Does an NCCL collective's kernel take longer in a training step than alone? The 32 MiB all-gather and
reduce-scatter of sequence-parallel TP, timed by the PyTorch profiler (Kineto kernel durations, as the collective
sweep times them) in three settings on the same GPUs:

  alone      back to back, a device sync between calls (the sweep's setting)
  serial     each right after a bf16 GEMM on the same stream (a TP step without overlap)
  beside     while a GEMM runs on another stream (compute-communication overlap)

Prints, per setting and collective, the median kernel time on each rank and the minimum over ranks (the
last-arriving rank: the transfer without waiting for peers). docs/SIMULATOR.md "Collective time by group size".
Usage: python3 bench/gpu/collective_beside_compute.py [--gpus 2] [--out DIR]
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from spawn_ranks import spawn_ranks  # noqa: E402

BYTES = 4096 * 4096 * 2  # seq x hidden, bf16: the TP step's activation
REPS = 30


def worker(rank, world_size, args):
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world_size, device_id=torch.device("cuda", rank))
    elements = BYTES // 2
    whole = torch.randn(elements, device="cuda", dtype=torch.bfloat16)
    part = whole[: elements // world_size].clone()
    out = torch.empty_like(whole)
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 14336, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()

    def collective(kind):
        if kind == "all_gather":
            dist.all_gather_into_tensor(out, part)
        else:
            dist.reduce_scatter_tensor(out[: elements // world_size], whole)

    def run(setting, kind):
        if setting == "alone":
            torch.cuda.synchronize()
            dist.barrier()
            collective(kind)
        elif setting == "serial":
            torch.matmul(a, b)
            collective(kind)
        else:
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                torch.matmul(a, b)
                torch.matmul(a, b)
            collective(kind)
            torch.cuda.current_stream().wait_stream(side)

    results = {}
    for setting in ("alone", "serial", "beside"):
        for kind in ("all_gather", "reduce_scatter"):
            for _ in range(5):
                run(setting, kind)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(REPS):
                    run(setting, kind)
                torch.cuda.synchronize()
            kernel = "AllGather" if kind == "all_gather" else "ReduceScatter"  # not the barrier's AllReduce
            durations = [event.time_range.elapsed_us() for event in prof.events()
                         if event.device_type.name == "CUDA" and kernel in event.name]
            results[f"{setting} {kind}"] = durations
    gathered = [None] * world_size
    dist.all_gather_object(gathered, results)
    if rank == 0:
        summary = {}
        for key in results:
            per_rank = [sorted(r[key]) for r in gathered]
            count = min(len(d) for d in per_rank)
            # the k-th kernel's minimum over ranks, as collective_samples takes it (kernels in time order)
            in_order = [r[key][:count] for r in gathered]
            last_arrival = [min(d[i] for d in in_order) for i in range(count)]
            summary[key] = {"kernels": count,
                            "median_us_per_rank": [statistics.median(d) for d in per_rank],
                            "median_us_last_arrival": statistics.median(last_arrival)}
            print(f"{key:22s} rank medians {['%.1f' % m for m in summary[key]['median_us_per_rank']]} us, "
                  f"last arrival {summary[key]['median_us_last_arrival']:.1f} us ({count} kernels)")
        with open(os.path.join(args.out, "beside_compute.json"), "w") as handle:
            json.dump({"bytes": BYTES, "gpus": world_size, "reps": REPS, "summary": summary}, handle, indent=1)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=2, help="processes / GPUs")
    parser.add_argument("--out", default="beside-compute", help="output directory")
    parser.add_argument("--port", type=int, default=29571)
    spawn_ranks(worker, parser.parse_args(), "collective_beside_compute.py")


if __name__ == "__main__":
    main()

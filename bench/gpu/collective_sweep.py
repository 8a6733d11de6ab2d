#!/usr/bin/env python3
"""Profiles NCCL collectives over a size sweep on the GPUs of one host: the by-size data `calo calibrate` fits.

Run on a host with 2-8 NVIDIA GPUs and PyTorch with NCCL (no torchrun needed):
    python3 bench/gpu/collective_sweep.py --gpus 2 --out collective-sweep
One process per GPU (torch.multiprocessing). For each size from --min-bytes to --max-bytes (doubling), it issues
all-reduce, all-gather, reduce-scatter and all-to-all over every rank, a pipeline-style send/recv (each rank
sends S to the next and receives S from the previous, batched) and a one-way send/recv (KINDS below), each --reps times back to back and
synchronized, with the PyTorch profiler on (Kineto, record_shapes so each NCCL kernel carries its size and
group). Warm-up calls of every (kind, size) run before the profiler starts, so communicator setup and NCCL's
first-use allocations are not in the trace. Output: rank<N>.json.gz per rank and sizes.json (what was swept).
The sizes are the collective's total buffer: all-reduce in = out = S; all-gather out = S (in S/n); reduce-scatter
in = S (out S/n); all-to-all in = out = S; send/recv S each way; p2p S one way, bf16 throughout.
"""
import argparse
import gzip
import json
import os
import shutil
import sys

from spawn_ranks import spawn_ranks

# send_recv: each rank sends S to the next and receives S from the previous in one batched NCCL group (a
# pipeline's exchange; its kernels carry no size metadata in PyTorch 2.11 traces). p2p: even ranks send S to the
# next rank, odd ranks receive it, unbatched (the kernels carry "send"/"recv" with their sizes).
KINDS = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv", "p2p"]


def sweep_sizes(args):
    sizes, size = [], args.min_bytes
    while size <= args.max_bytes:
        sizes.append(size)
        size *= 2
    return sizes


def worker(rank, world_size, args):
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world_size, device_id=torch.device("cuda", rank))
    device = torch.device("cuda", rank)
    dtype = torch.bfloat16
    sizes = sweep_sizes(args)
    largest = sizes[-1] // 2  # bf16 elements of the largest buffer
    full = torch.randn(largest, device=device, dtype=dtype)
    out = torch.empty(largest, device=device, dtype=dtype)

    def issue(kind, size_bytes):
        # Each rank's chunk a whole number of 128-byte blocks: with a group size that is no power of two (3
        # ranks) the sizes are rounded down (4096 B -> 3840 B; the trace records the size that ran). Chunks
        # at unaligned offsets made NCCL's all-gather up to 1.9x and all-to-all 3x slower than 2 ranks.
        aligned = world_size * 64
        elements = size_bytes // 2 // aligned * aligned
        whole, part = full[:elements], full[: elements // world_size]
        if kind == "all_reduce":
            dist.all_reduce(whole)
        elif kind == "all_gather":
            dist.all_gather_into_tensor(out[:elements], part)
        elif kind == "reduce_scatter":
            dist.reduce_scatter_tensor(out[: elements // world_size], whole)
        elif kind == "all_to_all":
            dist.all_to_all_single(out[:elements], whole)
        elif kind == "p2p":  # one direction, unbatched: even ranks send S to the next, odd ranks receive it
            if rank % 2 == 0 and rank + 1 < world_size:
                dist.send(whole, rank + 1)
            elif rank % 2 == 1:
                dist.recv(out[:elements], rank - 1)
        else:  # a pipeline-style exchange with the next rank: S out, S in, one batched NCCL group
            peer_next, peer_prev = (rank + 1) % world_size, (rank - 1 + world_size) % world_size
            ops = [dist.P2POp(dist.isend, whole, peer_next), dist.P2POp(dist.irecv, out[:elements], peer_prev)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()

    kinds = args.kinds.split(",")
    for kind in kinds:  # warm-up outside the profiler
        for size in sizes:
            for _ in range(2):
                issue(kind, size)
    torch.cuda.synchronize()
    dist.barrier()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        for kind in kinds:
            for size in sizes:
                with record_function(f"{kind}_{size}"):
                    for _ in range(args.reps):
                        issue(kind, size)
                        torch.cuda.synchronize()  # one kernel at a time: no queueing behind the previous
                dist.barrier()
    plain = os.path.join(args.out, f"rank{rank}.json")
    prof.export_chrome_trace(plain)
    with open(plain, "rb") as source, gzip.open(plain + ".gz", "wb", compresslevel=9) as target:
        shutil.copyfileobj(source, target)
    os.remove(plain)
    dist.barrier()
    if rank == 0:
        with open(os.path.join(args.out, "sizes.json"), "w") as handle:
            json.dump({"gpus": world_size, "kinds": kinds, "sizes_bytes": sizes, "reps": args.reps,
                       "dtype": "bf16", "torch": torch.__version__,
                       "nccl": ".".join(str(part) for part in torch.cuda.nccl.version()),
                       "device": torch.cuda.get_device_name(0)}, handle, indent=1)
        print(f"collective_sweep: {len(kinds)} kinds x {len(sizes)} sizes x {args.reps} reps on {world_size} "
              f"GPUs -> {args.out}")
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=2, help="processes / GPUs (2..8)")
    parser.add_argument("--out", default="collective-sweep", help="output directory")
    parser.add_argument("--min-bytes", type=int, default=1 << 12, help="smallest buffer, bytes")
    parser.add_argument("--max-bytes", type=int, default=1 << 30, help="largest buffer, bytes")
    parser.add_argument("--reps", type=int, default=5, help="profiled calls per (kind, size)")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of {','.join(KINDS)}")
    parser.add_argument("--port", type=int, default=29541)
    args = parser.parse_args()
    if args.min_bytes < 1024 or args.max_bytes < args.min_bytes or args.min_bytes % 16:
        sys.exit("collective_sweep.py: --min-bytes must be >= 1024 and a multiple of 16, <= --max-bytes")
    unknown = sorted(set(args.kinds.split(",")) - set(KINDS))
    if unknown:
        sys.exit(f"collective_sweep.py: --kinds: {','.join(unknown)} unknown; use {','.join(KINDS)}")
    spawn_ranks(worker, args, "collective_sweep.py")


if __name__ == "__main__":
    main()

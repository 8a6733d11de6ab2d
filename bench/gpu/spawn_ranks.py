"""One process per GPU for the multi-GPU trace scripts (make_trace.py, collective_sweep.py)."""
import os
import sys


def spawn_ranks(worker, args, script):
    """Runs worker(rank, args.gpus, args) on args.gpus GPUs; exits naming `script` when that many are not there."""
    import torch
    import torch.multiprocessing as mp

    available = torch.cuda.device_count()
    if args.gpus < 2 or args.gpus > available:
        sys.exit(f"{script}: --gpus {args.gpus} needs 2..{available} (GPUs visible: {available})")
    os.makedirs(args.out, exist_ok=True)
    mp.spawn(worker, args=(args.gpus, args), nprocs=args.gpus, join=True)

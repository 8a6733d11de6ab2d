#!/usr/bin/env python3
"""Ground truth for calo's memory model (issue 39 item 1): one PyTorch training step of the Llama3-8B-shaped
stack of bench/exec_gpu/torch_reference.py, measured by PyTorch's caching allocator term by term.

The step is what a PyTorch-native trainer without a framework holds: bf16 weights, bf16 gradients from
autograd, fp32 master weights and AdamW's two fp32 moments (torch.optim.AdamW fused, over the master copies; the
bf16 gradient is copied into an fp32 master gradient, as Megatron-LM's distributed optimizer keeps fp32 main
grads). Activations are whatever autograd saves for backward (scaled_dot_product_attention, F.rms_norm, SwiGLU
as silu(gate) * up); recompute `full` wraps each layer in torch.utils.checkpoint, `selective` the attention core
only.

Prints one JSON object per line (the fields are named in bytes, ms): the state terms measured as the allocator's
growth when each is created, `activations_bytes` = allocated at the end of forward - allocated before it,
`peak_step_bytes` = torch.cuda.max_memory_allocated over forward + backward + optimizer, and
`peak_reserved_bytes` (the allocator's cache: what nvidia-smi would show, less the CUDA context). The runtime
beside the allocator: `device_total_bytes` and `device_used_bytes` (torch.cuda.mem_get_info: total - free, after
the measured steps), `runtime_bytes` = device used - the allocator's reserve at that moment (the CUDA context,
cuBLAS / cuDNN workspaces and handles: what the usable-memory rule's 4 GiB reserve stands for), and
`context_bytes` = the same right after the context was created, before the model.

Usage: python3 train_memory.py --layers 4 --seq 8192 --mbs 1 --recompute none [--steps 3]
       python3 train_memory.py --grid OUT.jsonl     (every configuration of GRID, each in its own process)
       python3 train_memory.py --tight OUT.jsonl    (TIGHT: near the card; an out-of-memory step is a line too)
"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "exec_gpu"))

# Near the card: configurations calo's pytorch accounting (`calo sim --trainer pytorch --layers N`) puts within the
# usable share (the control), beyond it but within the card ("tight") and just beyond the card: does a tight layout
# run? By the card's size. H100 80GB (79.65 GiB, usable 73.26): 8 none 70.11 GiB fits, 9 none 75.19 and 13 full
# 77.83 tight, 10 none 80.27 and 14 / 15 full 81.54 / 85.26 beyond. H200 (140.4 GiB, usable 132.19): 20 none 131.07
# fits, 21 none 136.14 and 28 / 29 full 133.61 / 137.33 tight, 22 none 141.22 and 30 full 141.05 beyond.
# Added 2026-12-06 after the grid showed full recompute's allocator reserve (11-14 % above its peak) beyond the
# margin: on the H100 11 full 70.39 GiB fits, 12 full 74.11 and 9 selective 74.62 tight (`--tight OUT --first 6`).
TIGHT = {
    80: [(8, 8192, 1, "none"), (9, 8192, 1, "none"), (10, 8192, 1, "none"), (13, 8192, 1, "full"),
         (14, 8192, 1, "full"), (15, 8192, 1, "full"), (11, 8192, 1, "full"), (12, 8192, 1, "full"),
         (9, 8192, 1, "selective")],
    141: [(20, 8192, 1, "none"), (21, 8192, 1, "none"), (22, 8192, 1, "none"), (28, 8192, 1, "full"),
          (29, 8192, 1, "full"), (30, 8192, 1, "full")],
}


def tight_grid():
    """TIGHT's configurations for this machine's first GPU (by its memory in GB, the nearer size)."""
    import torch
    total_gb = torch.cuda.get_device_properties(0).total_memory / 1e9
    return TIGHT[min(TIGHT, key=lambda size: abs(size - total_gb))]

GRID = [  # layers, seq, mbs, recompute
    (4, 2048, 1, "none"), (4, 4096, 1, "none"), (4, 8192, 1, "none"), (4, 16384, 1, "none"),
    (4, 4096, 2, "none"), (4, 4096, 4, "none"), (8, 8192, 1, "none"), (2, 8192, 1, "none"),
    (4, 8192, 1, "full"), (4, 16384, 1, "full"), (8, 8192, 1, "full"),
    (4, 8192, 1, "selective"), (8, 8192, 1, "selective"), (4, 8192, 2, "selective"),
]


def measure(args):
    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint

    import torch_reference as ref

    device = torch.device("cuda")
    torch.manual_seed(0)
    torch.zeros(1, device=device)  # creates the CUDA context

    def device_beyond_allocator():
        free, total = torch.cuda.mem_get_info()
        return total - free, total, total - free - torch.cuda.memory_reserved()

    _, _, context_bytes = device_beyond_allocator()
    c = ref.Config()
    allocated = torch.cuda.memory_allocated
    before = allocated()
    model = ref.Stack(c, args.layers).to(device=device, dtype=torch.bfloat16)
    params = list(model.parameters())
    weights_bytes = allocated() - before
    mark = allocated()
    for p in params:
        p.grad = torch.zeros_like(p)
    grads_bytes = allocated() - mark
    mark = allocated()
    master = [p.detach().float().clone() for p in params]
    for m in master:
        m.grad = torch.zeros_like(m)
    master_bytes = allocated() - mark
    optimizer = torch.optim.AdamW(master, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    mark = allocated()
    optimizer.step()  # creates exp_avg and exp_avg_sq
    adam_bytes = allocated() - mark
    for p in params:
        p.grad = None  # autograd allocates them in backward, as a trainer that zeroes with set_to_none does
    grads_bytes_after_free = allocated()

    tokens = torch.randint(0, c.vocab, (args.mbs, args.seq), device=device)
    targets = torch.randint(0, c.vocab, (args.mbs, args.seq), device=device)
    cos, sin = ref.rope_tables(args.seq, c.head_dim, c.rope_theta, device)

    sdpa = F.scaled_dot_product_attention
    if args.recompute == "selective":  # recompute the attention core in backward (Megatron's selective)
        def checkpointed_sdpa(*a, **k):
            return checkpoint(sdpa, *a, use_reentrant=False, **k)
        F.scaled_dot_product_attention = checkpointed_sdpa

    def forward():
        x = model.embedding(tokens)
        for layer in model.layers:
            if args.recompute == "full":
                x = checkpoint(layer, x, cos, sin, use_reentrant=False)
            else:
                x = layer(x, cos, sin)
        logits = model.logits(ref.rms_norm(x, model.norm))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.view(-1))

    def step():
        loss = forward()
        end_of_forward = allocated()
        loss.backward()
        for p, m in zip(params, master):
            m.grad.copy_(p.grad)
            p.grad = None
        optimizer.step()
        with torch.no_grad():
            for p, m in zip(params, master):
                p.copy_(m)
        return end_of_forward

    try:
        for _ in range(args.warmup):
            step()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before_step = allocated()
        times_ms = []
        activations = []
        for _ in range(args.steps):
            started = time.perf_counter()
            activations.append(step() - before_step)
            torch.cuda.synchronize()
            times_ms.append((time.perf_counter() - started) * 1e3)
    except torch.OutOfMemoryError as error:  # a measurement too: how far it got
        device_used, device_total, runtime_bytes = device_beyond_allocator()
        return {
            "layers": args.layers, "seq": args.seq, "mbs": args.mbs, "recompute": args.recompute,
            "device": torch.cuda.get_device_name(), "torch": torch.__version__, "out_of_memory": True,
            "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
            "peak_reserved_bytes": torch.cuda.max_memory_reserved(), "device_total_bytes": device_total,
            "device_used_bytes": device_used, "runtime_bytes": runtime_bytes, "context_bytes": context_bytes,
            "message": str(error).splitlines()[0][:300],
        }
    stats = torch.cuda.memory_stats()
    device_used, device_total, runtime_bytes = device_beyond_allocator()
    n_params = sum(p.numel() for p in params)
    return {
        "layers": args.layers, "seq": args.seq, "mbs": args.mbs, "recompute": args.recompute,
        "params": n_params, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "weights_bytes": weights_bytes, "grads_bytes": grads_bytes, "master_and_grad_fp32_bytes": master_bytes,
        "adam_bytes": adam_bytes, "state_bytes_before_step": before_step,
        "state_after_grad_free_bytes": grads_bytes_after_free,
        "activations_bytes": max(activations), "peak_step_bytes": torch.cuda.max_memory_allocated(),
        "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
        "alloc_retries": stats.get("num_alloc_retries", 0), "step_ms": min(times_ms),
        "device_total_bytes": device_total, "device_used_bytes": device_used, "runtime_bytes": runtime_bytes,
        "context_bytes": context_bytes,
    }


def run_grid(out_path, grid):
    script = os.path.abspath(__file__)
    with open(out_path, "w") as out:
        for index, (layers, seq, mbs, recompute) in enumerate(grid):
            command = [sys.executable, script, "--layers", str(layers), "--seq", str(seq), "--mbs", str(mbs),
                       "--recompute", recompute]
            started = time.time()
            done = subprocess.run(command, capture_output=True, text=True, timeout=300)
            line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
            if done.returncode != 0 or not line.startswith("{"):
                line = json.dumps({"layers": layers, "seq": seq, "mbs": mbs, "recompute": recompute,
                                   "error": (done.stderr or done.stdout)[-600:]})
            out.write(line + "\n")
            out.flush()
            print(f"train_memory: {index + 1}/{len(grid)} layers {layers} seq {seq} mbs {mbs} {recompute}: "
                  f"{time.time() - started:.0f} s", file=sys.stderr, flush=True)
    return 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--seq", type=int, default=8192)
    parser.add_argument("--mbs", type=int, default=1)
    parser.add_argument("--recompute", choices=["none", "selective", "full"], default="none")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--grid", default="", help="run every configuration of GRID, JSON lines to this file")
    parser.add_argument("--first", type=int, default=0,
                        help="--grid / --tight: start at this configuration (0-based)")
    parser.add_argument("--tight", default="", help="run every configuration of TIGHT, JSON lines to this file")
    args = parser.parse_args()
    if args.grid:
        return run_grid(args.grid, GRID[args.first:])
    if args.tight:
        return run_grid(args.tight, tight_grid()[args.first:])
    print(json.dumps(measure(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

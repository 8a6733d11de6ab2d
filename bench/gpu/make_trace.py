#!/usr/bin/env python3
"""Makes a small, real multi-GPU PyTorch profiler (Kineto) trace for Calorimeter's ingestion tests.

Run on a host with 2-4 NVIDIA GPUs and PyTorch with NCCL (no torchrun needed):
    python3 bench/gpu/make_trace.py --gpus 2 --out tests/fixtures/kineto_real
It spawns one process per GPU (torch.multiprocessing), trains a tiny transformer-ish block for a few steps and
profiles two of them. Every step exercises each collective kind that `calo ingest` categorizes:
  all-reduce (data-parallel gradients), all-gather and reduce-scatter (a ZeRO/FSDP-style parameter shard),
  all-to-all (MoE-style token exchange) and send/recv (pipeline-style activation hand-off around a ring),
plus GEMMs, attention (scaled_dot_product_attention), layer norm and elementwise kernels. Communication is
issued asynchronously on NCCL's streams while compute continues, so the trace has both overlapped and exposed
communication. Output: one rank<N>.json per rank (uncompressed Chrome trace, with NCCL metadata).
"""
import argparse
import os

from spawn_ranks import spawn_ranks


def worker(rank, world_size, args):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    device = torch.device("cuda", rank)
    torch.manual_seed(1234 + rank)
    hidden, heads, seq, batch = args.hidden, args.heads, args.seq, args.batch
    dtype = torch.bfloat16

    def param(*shape):
        return (torch.randn(*shape, device=device, dtype=dtype) * 0.02).requires_grad_()

    w_qkv, w_out = param(3 * hidden, hidden), param(hidden, hidden)
    w_up, w_down = param(4 * hidden, hidden), param(hidden, 4 * hidden)
    norm1 = torch.nn.LayerNorm(hidden, device=device, dtype=dtype)
    norm2 = torch.nn.LayerNorm(hidden, device=device, dtype=dtype)
    params = [w_qkv, w_out, w_up, w_down] + list(norm1.parameters()) + list(norm2.parameters())
    optimizer = torch.optim.AdamW(params, lr=1e-4, fused=True)
    # A flat parameter shard for the FSDP-style all-gather / reduce-scatter pair.
    shard_elems = args.shard_mib * (1 << 20) // 2
    shard = torch.randn(shard_elems, device=device, dtype=dtype)
    gathered = torch.empty(shard_elems * world_size, device=device, dtype=dtype)
    grad_full = torch.randn(shard_elems * world_size, device=device, dtype=dtype)
    grad_shard = torch.empty(shard_elems, device=device, dtype=dtype)
    tokens = torch.randn(batch * seq, hidden, device=device, dtype=dtype)
    send_buf = torch.randn(batch * seq * hidden, device=device, dtype=dtype)
    recv_buf = torch.empty_like(send_buf)

    def block(x):
        h = norm1(x)
        qkv = F.linear(h, w_qkv).view(batch, seq, 3, heads, hidden // heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        x = x + F.linear(attn.transpose(1, 2).reshape(batch, seq, hidden), w_out)
        h = norm2(x)
        return x + F.linear(F.gelu(F.linear(h, w_up)), w_down)

    def train_step():
        # FSDP-style: gather the parameter shard while the forward pass runs.
        gather_work = dist.all_gather_into_tensor(gathered, shard, async_op=True)
        x = tokens.view(batch, seq, hidden)
        y = block(x)
        # MoE-style token exchange.
        routed = torch.empty_like(tokens)
        dist.all_to_all_single(routed, y.reshape(-1, hidden).contiguous())
        y = block(routed.view(batch, seq, hidden))
        loss = y.float().pow(2).mean()
        loss.backward()
        gather_work.wait()
        # Pipeline-style activation hand-off around the ring (batched isend/irecv).
        ops = [dist.P2POp(dist.isend, send_buf, (rank + 1) % world_size),
               dist.P2POp(dist.irecv, recv_buf, (rank - 1 + world_size) % world_size)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        # Data-parallel gradient all-reduce overlapped with the shard's reduce-scatter.
        works = [dist.all_reduce(p.grad, async_op=True) for p in params]
        scatter_work = dist.reduce_scatter_tensor(grad_shard, grad_full, async_op=True)
        extra = F.linear(tokens, w_out.detach())  # compute that overlaps the collectives
        for work in works:
            work.wait()
        scatter_work.wait()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return extra

    for _ in range(3):  # warm-up outside the profiler (NCCL communicator setup, cuBLAS heuristics)
        train_step()
    torch.cuda.synchronize()
    dist.barrier()
    trace_path = os.path.join(args.out, f"rank{rank}.json")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 schedule=schedule(wait=0, warmup=1, active=args.steps, repeat=1),
                 record_shapes=True) as prof:
        for _ in range(1 + args.steps):
            with record_function("train_step"):
                train_step()
            torch.cuda.synchronize()
            prof.step()
    prof.export_chrome_trace(trace_path)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(f"wrote {world_size} traces to {args.out}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=2, help="processes / GPUs (2-4)")
    parser.add_argument("--out", default="tests/fixtures/kineto_real", help="output directory")
    parser.add_argument("--steps", type=int, default=2, help="profiled steps")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--shard-mib", type=int, default=8, help="FSDP-style shard per rank, MiB")
    parser.add_argument("--port", type=int, default=29533)
    args = parser.parse_args()
    spawn_ranks(worker, args, "make_trace.py")


if __name__ == "__main__":
    main()

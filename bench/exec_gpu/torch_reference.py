#!/usr/bin/env python3
"""PyTorch eager reference for `calo bench` on one GPU: a Llama3-8B-shaped stack of N layers (default 4), seq 8192,
micro-batch 1, bf16, forward + backward with scaled_dot_product_attention (causal, GQA), same shapes as calo's
graph: embedding, per layer RMSNorm -> fused QKV (4096 -> 6144) -> RoPE -> SDPA -> output proj -> residual ->
RMSNorm -> fused gate+up (4096 -> 28672) -> SwiGLU -> down (14336 -> 4096) -> residual, final RMSNorm, logits
(4096 -> 128256), cross-entropy. Prints '#' config lines, a table of step times, and a headline with the mean
forward+backward time (the figure compared with calo's fwd+bwd time) and, separately, an AdamW step over
fp32 master copies of the parameters (calo's optimizer op).

Usage: python3 torch_reference.py [--layers 4] [--seq 8192] [--steps 10] [--warmup 3] [--json out.json]
                                 [--profile TRACE.json.gz]   (PyTorch profiler, shapes recorded, 2 steps after warm-up:
                                                              a Kineto trace for `calo ingest` / `calo calibrate`)
"""
import argparse
import json
import math
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError as error:  # the GPU host may lack PyTorch: say so and exit 3 (the run script logs it)
    print(f"# torch_reference: PyTorch not importable ({error}); skipped")
    sys.exit(3)


class Config:
    hidden = 4096
    heads = 32
    kv_heads = 8
    head_dim = 128
    ffn = 14336
    vocab = 128256
    rope_theta = 500000.0


def rms_norm(x, weight, eps=1e-5):
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    variance = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(variance + eps)).to(x.dtype) * weight


def rope_tables(seq, head_dim, theta, device):
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv)
    return torch.cos(angles).to(torch.bfloat16), torch.sin(angles).to(torch.bfloat16)


def apply_rope(x, cos, sin):
    half = x.shape[-1] // 2
    x0, x1 = x[..., :half], x[..., half:]
    return torch.cat((x0 * cos - x1 * sin, x1 * cos + x0 * sin), dim=-1)


class Layer(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.norm1 = torch.nn.Parameter(torch.ones(c.hidden))
        self.qkv = torch.nn.Linear(c.hidden, (c.heads + 2 * c.kv_heads) * c.head_dim, bias=False)
        self.proj = torch.nn.Linear(c.heads * c.head_dim, c.hidden, bias=False)
        self.norm2 = torch.nn.Parameter(torch.ones(c.hidden))
        self.fc1 = torch.nn.Linear(c.hidden, 2 * c.ffn, bias=False)
        self.fc2 = torch.nn.Linear(c.ffn, c.hidden, bias=False)

    def forward(self, x, cos, sin):
        c = self.c
        b, s, _ = x.shape
        qkv = self.qkv(rms_norm(x, self.norm1))
        q, k, v = qkv.split([c.heads * c.head_dim, c.kv_heads * c.head_dim, c.kv_heads * c.head_dim], dim=-1)
        q = apply_rope(q.view(b, s, c.heads, c.head_dim).transpose(1, 2), cos, sin)
        k = apply_rope(k.view(b, s, c.kv_heads, c.head_dim).transpose(1, 2), cos, sin)
        v = v.view(b, s, c.kv_heads, c.head_dim).transpose(1, 2)
        try:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        except TypeError:  # torch < 2.5: expand kv heads
            group = c.heads // c.kv_heads
            o = F.scaled_dot_product_attention(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1),
                                               is_causal=True)
        x = x + self.proj(o.transpose(1, 2).reshape(b, s, c.heads * c.head_dim))
        gate, up = self.fc1(rms_norm(x, self.norm2)).chunk(2, dim=-1)
        return x + self.fc2(F.silu(gate) * up)


class Stack(torch.nn.Module):
    def __init__(self, c, layers):
        super().__init__()
        self.embedding = torch.nn.Embedding(c.vocab, c.hidden)
        self.layers = torch.nn.ModuleList(Layer(c) for _ in range(layers))
        self.norm = torch.nn.Parameter(torch.ones(c.hidden))
        self.logits = torch.nn.Linear(c.hidden, c.vocab, bias=False)

    def forward(self, tokens, targets, cos, sin):
        x = self.embedding(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin)
        logits = self.logits(rms_norm(x, self.norm))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.view(-1))


def profile_steps(path, fwd_bwd, optimizer, steps=2):
    """Writes a Kineto trace (input shapes recorded) of `steps` training steps to `path` (.json or .json.gz)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as profiler:
        for _ in range(steps):
            fwd_bwd()
            optimizer.step()
        torch.cuda.synchronize()
    profiler.export_chrome_trace(path)
    print(f"# torch_reference: Kineto trace of {steps} steps written to {path}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--seq", type=int, default=8192)
    parser.add_argument("--mbs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json", default="")
    parser.add_argument("--profile", default="", help="write a Kineto trace of 2 steps after the timed ones here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("# torch_reference: no CUDA device visible; skipped")
        return 3
    c = Config()
    device = torch.device("cuda")
    torch.manual_seed(0)
    model = Stack(c, args.layers).to(device=device, dtype=torch.bfloat16)
    params = [p for p in model.parameters()]
    master = [p.detach().float().clone() for p in params]
    grads32 = [torch.randn_like(m) * 1e-3 for m in master]
    optimizer = torch.optim.AdamW(master, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                                  fused=True)
    for m, g in zip(master, grads32):
        m.grad = g
    tokens = torch.randint(0, c.vocab, (args.mbs, args.seq), device=device)
    targets = torch.randint(0, c.vocab, (args.mbs, args.seq), device=device)
    cos, sin = rope_tables(args.seq, c.head_dim, c.rope_theta, device)
    n_params = sum(p.numel() for p in params)
    print(f"# torch_reference: torch {torch.__version__}, device {torch.cuda.get_device_name()}, "
          f"layers {args.layers}, seq {args.seq}, mbs {args.mbs}, bf16, params {n_params / 1e9:.3f} B")
    print(f"# sdpa backends: flash={torch.backends.cuda.flash_sdp_enabled()} "
          f"cudnn={getattr(torch.backends.cuda, 'cudnn_sdp_enabled', lambda: False)()} "
          f"mem_efficient={torch.backends.cuda.mem_efficient_sdp_enabled()}")

    def fwd_bwd():
        for p in params:
            p.grad = None
        loss = model(tokens, targets, cos, sin)
        loss.backward()
        return loss

    fwd_bwd_ms, opt_ms = [], []
    start_evt = torch.cuda.Event(enable_timing=True)
    mid_evt = torch.cuda.Event(enable_timing=True)
    end_evt = torch.cuda.Event(enable_timing=True)
    for step in range(args.warmup + args.steps):
        start_evt.record()
        fwd_bwd()
        mid_evt.record()
        optimizer.step()
        end_evt.record()
        torch.cuda.synchronize()
        if step >= args.warmup:
            fwd_bwd_ms.append(start_evt.elapsed_time(mid_evt))
            opt_ms.append(mid_evt.elapsed_time(end_evt))
    if args.profile:
        profile_steps(args.profile, fwd_bwd, optimizer)
    flops_per_token_layer = 2 * (c.hidden * (c.heads + 2 * c.kv_heads) * c.head_dim + c.heads * c.head_dim * c.hidden
                                 + c.hidden * 3 * c.ffn)
    tokens_n = args.mbs * args.seq
    gemm_flops = 3 * tokens_n * (args.layers * flops_per_token_layer + 2 * c.hidden * c.vocab)
    attn_flops = 3 * args.layers * args.mbs * 2 * 2 * args.seq * args.seq * c.heads * c.head_dim / 2
    mean_fb = sum(fwd_bwd_ms) / len(fwd_bwd_ms)
    mean_opt = sum(opt_ms) / len(opt_ms)
    print(f"{'step':>4} {'fwd_bwd_ms':>11} {'adamw_ms':>9}")
    for index, (fb, op) in enumerate(zip(fwd_bwd_ms, opt_ms)):
        print(f"{index:>4} {fb:>11.2f} {op:>9.2f}")
    tflops = (gemm_flops + attn_flops) / (mean_fb / 1e3) / 1e12
    print(f"torch_fwd_bwd_ms {mean_fb:.3f} torch_adamw_ms {mean_opt:.3f} torch_step_ms {mean_fb + mean_opt:.3f} "
          f"model_tflops {tflops:.1f}")
    print(f"headline: PyTorch eager {args.layers}-layer Llama3-8B seq {args.seq} fwd+bwd {mean_fb:.1f} ms "
          f"(+ AdamW {mean_opt:.1f} ms)")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"fwd_bwd_ms": mean_fb, "adamw_ms": mean_opt, "steps": fwd_bwd_ms, "layers": args.layers,
                       "seq": args.seq, "torch": torch.__version__, "device": torch.cuda.get_device_name()},
                      handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

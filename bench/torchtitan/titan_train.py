#!/usr/bin/env python3
"""torchtitan (PyPI 0.2.2) training a Llama3-8B slice: the peer `calo bench` is measured against (issue 43).

This runs torchtitan's own entry point (`torchtitan.train.main`: its ConfigManager parses torchtitan's command-line
flags, its Trainer builds the Llama3 model, applies `parallelize_llama` — FSDP2 / TP / torch.compile — and runs
AdamW, cross-entropy, gradient clipping, the LR schedule and its metrics line `step: N  loss: ...  memory: ...GiB
tps: ...  tflops: ...  mfu: ...%`, which `calo record --markers torchtitan` turns into steps). It registers one
train spec, `calo_llama3`: torchtitan's llama3 spec unchanged except (1) flavors that keep the first N layers of a
llama3 flavor and (2) a tokenizer and dataloader that hand out uniform random token ids of the model's vocabulary,
because the GPU host has neither a corpus nor tokenizer files. Attention is the flavor's own (SDPA, causal).

Why 0.2.2: torchtitan 0.3.0 imports `torch.distributed.fsdp.DataParallelMeshDims`, which PyTorch 2.11 (the GPU
host's) lacks; 0.2.2 is the newest release that runs on it.

torchtitan's llama3 package imports the HF `datasets` package at import time for its text loader (pyarrow, ~45 MB:
more than the GPU host's 64 MiB carry). This run never loads a dataset, so when `datasets` is absent a named
placeholder module stands in for that import; calling anything in it raises.

Usage (one process per GPU):
  torchrun --standalone --nproc_per_node N titan_train.py [--flavor 8B] [--layers 4] [--seq 8192]
      [--local-batch 1] [--steps 30] [--warmup 5] [--compile] [--tp 1] [--pp 1] [--cp 1] [--ac none|selective|full]
      [--profile-step K] [--dump DIR] [--json OUT.json] [-- more torchtitan flags]
Writes, on every rank (rank 0 at --json, rank r at NAME.rank<r>.json), a JSON summary: mean step time after
warm-up, tokens/s, the allocator's peak per logged step and resident memory after the last step, the torchtitan
command line. torchtitan's own log lines are printed unchanged.
"""
import argparse
import dataclasses
import importlib.util
import json
import os
import sys
import time
import types


def install_datasets_placeholder():
    """Stands in for HF `datasets` (imported, never used, by torchtitan's text loader) when it is absent."""
    if importlib.util.find_spec("datasets") is not None:
        return

    def unavailable(*_args, **_kwargs):
        raise RuntimeError("titan_train.py: HF datasets is not carried to the GPU host; this run uses random tokens")

    datasets = types.ModuleType("datasets")
    datasets.Dataset = type("Dataset", (), {"__init__": unavailable})
    datasets.IterableDataset = type("IterableDataset", (), {"__init__": unavailable})
    datasets.load_dataset = unavailable
    distributed = types.ModuleType("datasets.distributed")
    distributed.split_dataset_by_node = unavailable
    datasets.distributed = distributed
    sys.modules["datasets"] = datasets
    sys.modules["datasets.distributed"] = distributed


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--flavor", default="8B", help="torchtitan llama3 flavor (debugmodel, 8B, 70B, 405B)")
    parser.add_argument("--layers", type=int, default=4, help="keep the first N transformer layers")
    parser.add_argument("--seq", type=int, default=8192, help="sequence length (tokens)")
    parser.add_argument("--local-batch", type=int, default=1, help="sequences per data-parallel rank per step")
    parser.add_argument("--steps", type=int, default=30, help="training steps")
    parser.add_argument("--warmup", type=int, default=5, help="steps excluded from the summary")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model and the loss")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel degree")
    parser.add_argument("--pp", type=int, default=1, help="pipeline-parallel degree")
    parser.add_argument("--cp", type=int, default=1, help="context-parallel degree")
    parser.add_argument("--ac", default="none", choices=["none", "selective", "full"], help="activation checkpointing")
    parser.add_argument("--profile-step", type=int, default=0, help="write torchtitan's Kineto trace of this step")
    parser.add_argument("--dump", default="titan_out", help="torchtitan dump folder (traces, logs)")
    parser.add_argument("--json", default="", help="write the summary JSON here (rank 0)")
    parser.add_argument("extra", nargs="*", help="more torchtitan flags, after --")
    return parser.parse_args()


def register_spec(args):
    """Registers `calo_llama3`: torchtitan's llama3 train spec with sliced flavors and random tokens."""
    import torch
    import torchtitan.models.llama3 as llama3
    from torchtitan.components.dataloader import BaseDataLoader
    from torchtitan.components.tokenizer import BaseTokenizer
    from torchtitan.protocols.train_spec import register_train_spec

    base = llama3.llama3_args[args.flavor]
    flavor = sliced_flavor(args)
    vocab = base.vocab_size

    class RandomTokenizer(BaseTokenizer):
        def encode(self, *_args, **_kwargs):
            raise RuntimeError("RandomTokenizer has no text")

        def decode(self, *_args, **_kwargs):
            raise RuntimeError("RandomTokenizer has no text")

        def get_vocab_size(self):
            return vocab

    class RandomTokens(BaseDataLoader):
        def __init__(self, dp_rank, seq_len, batch):
            self.generator = torch.Generator().manual_seed(1234 + dp_rank)
            self.seq_len, self.batch = seq_len, batch

        def __iter__(self):
            while True:
                tokens = torch.randint(0, vocab, (self.batch, self.seq_len + 1), generator=self.generator)
                yield {"input": tokens[:, :-1].contiguous()}, tokens[:, 1:].contiguous()

        def state_dict(self):
            return {}

        def load_state_dict(self, state_dict):
            del state_dict

    def build_dataloader(dp_world_size, dp_rank, tokenizer, job_config, **_kwargs):
        del dp_world_size, tokenizer
        return RandomTokens(dp_rank, job_config.training.seq_len, job_config.training.local_batch_size)

    spec = dataclasses.replace(
        llama3.get_train_spec(),
        model_args={flavor: dataclasses.replace(base, n_layers=args.layers)},
        build_dataloader_fn=build_dataloader,
        build_tokenizer_fn=lambda job_config: RandomTokenizer(),
        build_validator_fn=None,
    )
    register_train_spec("calo_llama3", spec)


def sliced_flavor(args):
    """The registered flavor's name: the llama3 flavor and how many layers it keeps."""
    return f"{args.flavor}-{args.layers}layers"


def torchtitan_flags(args, flavor):
    """torchtitan's own command-line flags for this run (parsed by its ConfigManager)."""
    flags = ["--model.name", "calo_llama3", "--model.flavor", flavor, "--job.dump_folder", args.dump,
             "--training.seq_len", str(args.seq), "--training.local_batch_size", str(args.local_batch),
             "--training.steps", str(args.steps), "--lr_scheduler.warmup_steps", "2",
             "--parallelism.tensor_parallel_degree", str(args.tp),
             "--parallelism.pipeline_parallel_degree", str(args.pp),
             "--parallelism.context_parallel_degree", str(args.cp),
             "--activation_checkpoint.mode", args.ac, "--metrics.log_freq", "1",
             "--metrics.disable_color_printing"]
    if args.compile:
        flags.append("--compile.enable")
    if args.profile_step > 0:
        flags += ["--profiling.enable_profiling", "--profiling.profile_freq", str(args.profile_step)]
    return flags + args.extra


STEP_SECONDS = []  # device-synchronised wall time of each Trainer.train_step, this rank
STEP_PEAK_BYTES = []  # torch.cuda.max_memory_allocated just before torchtitan resets it (once per logged step)


def record_peaks_before_resets():
    """torchtitan resets the allocator's peak statistics each time it logs a step; keep each peak first."""
    import torch

    reset = torch.cuda.reset_peak_memory_stats

    def recording_reset(*args, **kwargs):
        STEP_PEAK_BYTES.append(torch.cuda.max_memory_allocated())
        return reset(*args, **kwargs)

    torch.cuda.reset_peak_memory_stats = recording_reset


def timed_trainer():
    """torchtitan's Trainer with each train_step timed (synchronised before and after)."""
    import torch
    from torchtitan.train import Trainer

    class TimedTrainer(Trainer):
        def train_step(self, data_iterator):
            torch.cuda.synchronize()
            start = time.perf_counter()
            result = super().train_step(data_iterator)
            torch.cuda.synchronize()
            STEP_SECONDS.append(time.perf_counter() - start)
            return result

    return TimedTrainer


def summary(args, flags, world):
    """The JSON figures compared with `calo bench`: mean step after warm-up, tokens/s, peak memory."""
    import torch
    import torchtitan

    kept = STEP_SECONDS[args.warmup:] or STEP_SECONDS
    mean_s = sum(kept) / len(kept) if kept else float("nan")
    data_parallel = max(world // max(args.tp * args.pp * args.cp, 1), 1)
    return {
        "peer": "torchtitan",
        "torchtitan_version": torchtitan.__version__,
        "torch_version": torch.__version__,
        "device": torch.cuda.get_device_name(0),
        "torchtitan_flags": flags,
        "flavor": args.flavor,
        "layers": args.layers,
        "seq": args.seq,
        "local_batch": args.local_batch,
        "world": world,
        "tp": args.tp,
        "pp": args.pp,
        "cp": args.cp,
        "rank": int(os.environ.get("RANK", "0")),
        "compile": args.compile,
        "ac": args.ac,
        "steps_kept": len(kept),
        "step_s_mean": mean_s,
        "step_s_min": min(kept) if kept else None,
        "step_s_max": max(kept) if kept else None,
        "step_s_all": STEP_SECONDS,
        "tokens_per_s": args.local_batch * args.seq * data_parallel / mean_s,
        # torchtitan resets the peak statistics each time it logs; the peaks are kept just before each reset.
        "peak_allocated_bytes": max(STEP_PEAK_BYTES[args.warmup:] or STEP_PEAK_BYTES or [0]),
        "peak_allocated_bytes_by_reset": STEP_PEAK_BYTES,
        "allocated_after_last_step_bytes": torch.cuda.memory_allocated(),
        "reserved_after_last_step_bytes": torch.cuda.memory_reserved(),
    }


def rank_json_path(path, rank):
    """Where `rank` writes its summary: rank 0 at --json itself, rank r at NAME.rank<r>.json beside it."""
    if rank == 0:
        return path
    stem, dot, ext = path.rpartition(".")
    return f"{stem}.rank{rank}.{ext}" if dot else f"{path}.rank{rank}"


def main():
    args = parse_args()
    flags = torchtitan_flags(args, sliced_flavor(args))
    # Before any torchtitan import: its ConfigManager.parse_args takes sys.argv[1:] as the default it binds then.
    sys.argv = [sys.argv[0]] + flags
    install_datasets_placeholder()
    register_spec(args)
    from torchtitan.train import main as torchtitan_main

    record_peaks_before_resets()
    torchtitan_main(timed_trainer())
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if args.json:
        with open(rank_json_path(args.json, int(os.environ.get("RANK", "0"))), "w") as out:
            json.dump(summary(args, flags, world), out, indent=1)


if __name__ == "__main__":
    main()

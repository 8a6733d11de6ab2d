"""A training-loop stand-in run by the tests under a real `calo record`: it uses the calo package as a user
would (markers, both framework callbacks driven through their hooks), then exits."""

import sys
import time
import types

import calo

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
step_s = float(sys.argv[2]) if len(sys.argv) > 2 else 0.03

assert calo.enabled(), "CALO_MARKER_SOCKET is not set: run me under calo record"

# A plain loop on rank 0: steps with a phase inside.
for i in range(steps):
    with calo.step(i, rank=0):
        with calo.phase("compute", rank=0):
            time.sleep(step_s)
        time.sleep(step_s / 3)

# Hugging Face Trainer's hook order with gradient accumulation 2, rank 1 (args.process_index).
hf = calo.HFCallback()
args = types.SimpleNamespace(process_index=1)
state = types.SimpleNamespace(global_step=0)
for optimizer_step in range(3):
    hf.on_step_begin(args, state, None)
    time.sleep(step_s)
    state.global_step += 1  # the Trainer raises global_step before on_step_end
    hf.on_step_end(args, state, None)

# PyTorch Lightning's hook order with accumulate_grad_batches=2, rank 2 (trainer.global_rank).
lightning = calo.LightningCallback()
trainer = types.SimpleNamespace(global_step=0, global_rank=2)
for batch_idx in range(6):
    lightning.on_train_batch_start(trainer, None, None, batch_idx)
    time.sleep(step_s / 2)
    if batch_idx % 2 == 1:
        trainer.global_step += 1
    lightning.on_train_batch_end(trainer, None, None, None, batch_idx)

# One line calo cannot parse: reported as a run event.
calo.mark("this is not a marker")
time.sleep(0.3)  # let calo drain the socket before the child exits
print("child done", flush=True)

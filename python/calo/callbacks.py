"""Callbacks that mark every optimizer step for PyTorch Lightning and Hugging Face Transformers.

The classes are built on first use (``calo.LightningCallback``, ``calo.HFCallback``) so that ``import calo`` needs
neither library. Each subclasses the framework's callback base when the framework is installed (the frameworks
call every hook of their base on each callback) and ``object`` otherwise.
"""

import importlib

from . import markers


def _first_available(*candidates):
    for module_name, attribute in candidates:
        try:
            return getattr(importlib.import_module(module_name), attribute)
        except ImportError:
            continue
    return object


class _StepTracker:
    """One open optimizer step at a time: begun when none is open, ended when the optimizer has stepped."""

    def __init__(self):
        self.open_step = None

    def begin(self, step_number, rank):
        if self.open_step is None:
            self.open_step = int(step_number)
            markers.begin_step(self.open_step, rank)

    def end_if_stepped(self, step_number_now, rank):
        if self.open_step is not None and int(step_number_now) > self.open_step:
            markers.end_step(self.open_step, rank)
            self.open_step = None


def make_lightning_callback_class():
    """A PyTorch Lightning Callback marking optimizer steps (``trainer.global_step``) per ``trainer.global_rank``.
    With gradient accumulation a step spans its micro-batches: it begins at the first batch and ends after the
    batch whose optimizer step raised ``global_step``."""
    base = _first_available(("lightning.pytorch", "Callback"), ("pytorch_lightning", "Callback"))

    class LightningCallback(base):
        def __init__(self):
            super().__init__()
            self._tracker = _StepTracker()

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx, *args):
            self._tracker.begin(trainer.global_step, getattr(trainer, "global_rank", None))

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, *args):
            self._tracker.end_if_stepped(trainer.global_step, getattr(trainer, "global_rank", None))

    return LightningCallback


def make_hf_callback_class():
    """A Hugging Face TrainerCallback marking optimizer steps: ``on_step_begin`` opens step ``state.global_step``
    (called once per gradient-accumulation cycle), ``on_step_end`` (after the optimizer step, ``global_step``
    already raised) closes it; rank = ``args.process_index``."""
    base = _first_available(("transformers", "TrainerCallback"))

    class HFCallback(base):
        def __init__(self):
            super().__init__()
            self._tracker = _StepTracker()

        def on_step_begin(self, args, state, control, **kwargs):
            self._tracker.begin(state.global_step, getattr(args, "process_index", None))

        def on_step_end(self, args, state, control, **kwargs):
            self._tracker.end_if_stepped(state.global_step, getattr(args, "process_index", None))

    return HFCallback

"""Calorimeter from Python: markers for `calo record` and run stores as pandas DataFrames.

``calo.step(i)``, ``calo.phase(name)``, ``calo.mark(line)``; ``calo.LightningCallback()``, ``calo.HFCallback()``;
``calo.load_run(path)``, ``calo.load_campaign(dir)``. See python/README.md and docs/TELEMETRY.md.
"""

from .markers import begin_phase, begin_step, enabled, end_phase, end_step, mark, phase, step

__version__ = "0.3.0"

__all__ = ["step", "phase", "mark", "enabled", "begin_step", "end_step", "begin_phase", "end_phase",
           "load_run", "load_campaign", "Run", "Campaign", "LightningCallback", "HFCallback"]

_lazy_classes = {}


def __getattr__(name):
    # Data (pandas) and the framework callbacks are imported on first use: markers alone import nothing heavy.
    if name in ("load_run", "load_campaign", "Run", "Campaign"):
        from . import data
        return getattr(data, name)
    if name in ("LightningCallback", "HFCallback"):
        if name not in _lazy_classes:
            from . import callbacks
            build = (callbacks.make_lightning_callback_class if name == "LightningCallback"
                     else callbacks.make_hf_callback_class)
            _lazy_classes[name] = build()
        return _lazy_classes[name]
    raise AttributeError(f"module 'calo' has no attribute {name!r}")

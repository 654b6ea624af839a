"""poolkit's paper benchmarks, a distribution of their own (``poolkit-bench``, benchmarks/papers): each module
reproduces one paper behind a pooler and is a ``poolkit bench NAME`` command (:mod:`.commands`), its settings in
``<module>_config``. ``snr``: the noise-robustness benchmark of Brothers (ICML 2025); ``vision``: spatial poolers
after a small CNN on Fashion-MNIST; the others are listed in :data:`.commands.BENCHMARKS`. The names below load their
module when first used, so that the core CLI can list the commands without importing torch."""

import importlib

from poolkit.extras import require

require("cli", "pandas", "tqdm", "matplotlib", "rich")

_HOMES = {"FULL": "snr_config", "QUICK": "snr_config", "SNRConfig": "snr_config", "run_snr": "snr",
          "run_snr_command": "snr", "CPU_SWEEP": "snr_sweep_config", "SweepConfig": "snr_sweep_config",
          "run_snr_sweep": "snr_sweep", "VisionConfig": "vision_config", "run_vision": "vision"}
__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)

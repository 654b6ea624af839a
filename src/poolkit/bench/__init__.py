"""Benchmarks. ``snr``: the noise-robustness benchmark of Brothers (ICML 2025); ``vision``: spatial poolers after
a small CNN on Fashion-MNIST."""

from ..extras import require

require("cli", "pandas", "tqdm", "matplotlib", "rich")

from .snr import FULL, QUICK, SNRConfig, add_snr_arguments, run_snr, run_snr_command  # noqa: E402
from .snr_sweep import CPU_SWEEP, SweepConfig, run_snr_sweep  # noqa: E402
from .vision import VisionConfig, run_vision  # noqa: E402

__all__ = ["CPU_SWEEP", "FULL", "QUICK", "SNRConfig", "SweepConfig", "VisionConfig", "add_snr_arguments", "run_snr",
           "run_snr_command", "run_snr_sweep", "run_vision"]

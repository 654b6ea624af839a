"""Benchmarks. ``snr``: the noise-robustness benchmark of Brothers (ICML 2025)."""

from ..extras import require

require("cli", "pandas", "tqdm", "matplotlib", "rich")

from .snr import FULL, QUICK, SNRConfig, add_snr_arguments, run_snr, run_snr_command  # noqa: E402

__all__ = ["FULL", "QUICK", "SNRConfig", "add_snr_arguments", "run_snr", "run_snr_command"]

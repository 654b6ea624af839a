"""Benchmarks. ``snr``: the noise-robustness benchmark of Brothers (ICML 2025)."""

from .snr import FULL, QUICK, SNRConfig, add_snr_arguments, run_snr, run_snr_command

__all__ = ["FULL", "QUICK", "SNRConfig", "add_snr_arguments", "run_snr", "run_snr_command"]

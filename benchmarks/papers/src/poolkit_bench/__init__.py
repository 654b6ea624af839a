"""poolkit's paper benchmarks, a distribution of their own (``poolkit-bench``, benchmarks/papers): each module
reproduces one paper behind a pooler and is a ``poolkit bench NAME`` command (:mod:`.commands`). ``snr``: the
noise-robustness benchmark of Brothers (ICML 2025); ``vision``: spatial poolers after a small CNN on
Fashion-MNIST; the others are listed in :data:`.commands.BENCHMARKS`."""

from poolkit.extras import require

require("cli", "pandas", "tqdm", "matplotlib", "rich")

from .snr import FULL, QUICK, SNRConfig, add_snr_arguments, run_snr, run_snr_command  # noqa: E402
from .snr_sweep import CPU_SWEEP, SweepConfig, run_snr_sweep  # noqa: E402
from .vision import VisionConfig, run_vision  # noqa: E402

__all__ = ["CPU_SWEEP", "FULL", "QUICK", "SNRConfig", "SweepConfig", "VisionConfig", "add_snr_arguments", "run_snr",
           "run_snr_command", "run_snr_sweep", "run_vision"]

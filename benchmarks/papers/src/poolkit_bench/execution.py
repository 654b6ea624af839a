"""Where a benchmark's tasks run: the settings a config inherits (:class:`Execution`) and their check. torch is
imported only to check a device, so that a command's options are read without it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from poolkit.errors import PoolkitError
from poolkit.settings import option

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Execution:
    """The settings of a benchmark config that say where its tasks run (a config inherits them)."""

    workers: int = option(2, "CPU processes running tasks in parallel")
    threads: int | None = option(1, "torch threads per worker", none="torch's default")
    device: str = option("cpu", "cpu, cuda, cuda:N or auto")

    def check_execution(self) -> None:
        check_execution(threads=self.threads, workers=self.workers, device=self.device)


def torch_device(name: str) -> torch.device:
    """``auto`` (CUDA when torch sees a GPU, else CPU), ``cpu``, ``cuda`` or ``cuda:N``."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def check_execution(*, threads: int | None, workers: int = 1, device: str = "cpu") -> None:
    """A PoolkitError naming the setting unless ``threads`` is a positive int or None, ``workers`` a positive int,
    ``device`` one torch can use here, and workers > 1 only on CPU."""
    import torch

    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
        raise PoolkitError(f"threads must be a positive int or None, got {threads!r}")
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise PoolkitError(f"workers must be a positive int, got {workers!r}")
    try:
        chosen = torch_device(device)
    except (RuntimeError, TypeError):
        raise PoolkitError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}") from None
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise PoolkitError(f"device {device!r} asked for, but torch sees no CUDA GPU; use 'cpu'")
    if chosen.type != "cpu" and workers > 1:
        raise PoolkitError(f"workers > 1 runs on CPU only; use workers=1 with device {device!r}")

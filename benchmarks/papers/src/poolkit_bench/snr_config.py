"""The settings of ``poolkit bench snr`` (:mod:`.snr`): its config, presets and result files, and the benchmark's
pooler names. Free of torch, so that the command's options are read without it: the pooler registry is imported
in the functions that use it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from poolkit.errors import PoolkitError
from poolkit.settings import Preset, Presets, check_counts, option

from .execution import Execution

#: The paper's neighbour counts (SNR = K / 128).
PAPER_KS = (1, 2, 4, 8, 16, 32, 64, 128)
DEFAULT_POOLERS = ("adapool", "mean", "max", "cls")
RESULT_FILES = ("results.csv", "results.json", "mse_vs_snr.png", "report.html")
#: Poolers of this benchmark only: name -> (the registry pooler reading the result, prepend a CLS token).
SNR_POOLERS = {"cls": ("cls", True), "vector0": ("cls", False)}


@dataclass(frozen=True)
class SNRConfig(Execution):
    """Every setting of a benchmark run. The defaults are ``--quick``; :data:`FULL` is the paper's."""

    poolers: tuple[str, ...] = option(DEFAULT_POOLERS, "token poolers separated by commas and/or spaces, or 'all'; "
                                      "cls is the paper's (a learned token prepended), vector0 reads the encoded "
                                      "vector 0", metavar="NAME", names=True)
    ks: tuple[int, ...] = option(PAPER_KS, "neighbour counts", metavar="K")
    seeds: int = option(3, "runs per (pooler, K); run i validates on fold i % folds")
    num_samples: int = option(4000, "samples drawn (the last tenth is the test set)", flag="--samples")
    num_vectors: int = option(128, "vectors per sample N (SNR = K / N)", flag="--vectors")
    dim: int = option(16, "vector width")
    layers: int = option(1, "encoder layers")
    heads: int = option(1, "attention heads")
    ff: int = 64
    dropout: float = 0.1
    lr: float = option(1e-2, "Adam learning rate")
    batch_size: int = option(64, "minibatch size")
    epochs: int = option(8, "epochs per run")
    folds: int = option(5, "contiguous folds")
    test_ratio: float = 0.1
    data_seed: int = option(42, "seed of the generated data")
    seed: int = option(1, "training seed of run 0 (run i uses seed + i)")
    preset: str = "quick"

    def validated(self) -> SNRConfig:
        """This config with ``poolers`` resolved ("all" = every token pooler); bad values raise."""
        from poolkit.pooling import list_poolers

        check_counts(self, ("seeds", "num_samples", "num_vectors", "dim", "heads", "ff", "batch_size", "epochs",
                            "folds"))
        check_counts(self, ("layers",), least=0)
        if self.folds < 2:
            raise PoolkitError(f"folds must be at least 2 (one validates, the rest train), got {self.folds}")
        if self.dim % self.heads:
            raise PoolkitError(f"dim {self.dim} is not divisible by heads {self.heads}")
        if not 0.0 <= self.dropout < 1.0:
            raise PoolkitError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if not 0.0 < self.test_ratio < 1.0:
            raise PoolkitError(f"test_ratio must be in (0, 1), got {self.test_ratio!r}")
        if not self.lr > 0:
            raise PoolkitError(f"lr must be positive, got {self.lr!r}")
        self.check_execution()
        test = int(self.num_samples * self.test_ratio)
        if test < 1 or (self.num_samples - test) // self.folds < 1:
            raise PoolkitError(f"num_samples={self.num_samples} is too few for a test split of "
                               f"{self.test_ratio} and {self.folds} folds")
        names = list(self.poolers)
        if not names:
            raise PoolkitError("no poolers given; name some, or 'all'")
        if "all" in names:
            names = [n for n in names if n != "all"] + list_poolers(kind="token") + list(SNR_POOLERS)
        resolved = []
        for name in names:
            canonical = resolve_snr_name(name)
            build_pooler(canonical, self)  # its options fit this config's sizes
            if canonical not in resolved:
                resolved.append(canonical)
        ks = check_ks(self.ks)
        if max(ks) > self.num_vectors:
            raise PoolkitError(f"K must be at most num_vectors={self.num_vectors}, got {max(ks)}")
        return dataclasses.replace(self, poolers=tuple(resolved), ks=ks)


QUICK = SNRConfig()
#: The paper's settings (its experiments/noise-robustness configs): 1M samples, 12 layers, 8 heads,
#: Adam 5e-4, batch 750, 100 epochs, 5 folds -- sized for a GPU.
FULL = SNRConfig(seeds=5, num_samples=1_000_000, layers=12, heads=8, lr=5e-4, batch_size=750,
                 epochs=100, workers=1, threads=None, device="auto", preset="full")
PRESETS = Presets("quick", {
    "quick": Preset(QUICK, "CPU-sized run (default): 4000 samples, 1 layer, 1 head, 8 epochs, 3 seeds, 2 workers"),
    "full": Preset(FULL, "the paper's scale (1M samples, 12 layers, 8 heads, 100 epochs, 5 folds); GPU")})


def resolve_snr_name(name: str) -> str:
    """The benchmark's name for a pooler: one of :data:`SNR_POOLERS` (the registry's first-token pooler,
    ``cls``, reads the prepended CLS token here), else the registry's canonical name of a token pooler."""
    from poolkit.pooling.spec import pooler_class, resolve_name

    canonical = str(name).strip().lower().replace("-", "_")
    if canonical not in SNR_POOLERS:
        canonical = resolve_name(name)  # unknown names raise with suggestions
        if pooler_class(canonical).kind != "token":
            raise PoolkitError(f"pooler {name!r} pools over layers; this benchmark needs a token pooler")
    return canonical


def build_pooler(name: str, config: SNRConfig):
    """A poolkit pooler for the benchmark. AdaPool's query is vector 0 and it has as many heads as the
    encoder, as in the paper; attention's scorer is ``ff`` wide (its default 512 would cost more than the
    encoder here); other poolers use their defaults."""
    from poolkit.pooling import get_pooler
    from poolkit.pooling.spec import resolve_name

    canonical = resolve_name(SNR_POOLERS.get(name, (name,))[0])
    options = {"adapool": {"query_index": 0, "num_heads": config.heads},
               "attention": {"attn_size": config.ff}}.get(canonical, {})
    return get_pooler(canonical, hidden_size=config.dim, **options)


def check_ks(ks) -> tuple[int, ...]:
    """The K values as a tuple of distinct positive ints; anything else raises."""
    ks = tuple(ks)
    if not ks or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in ks):
        raise PoolkitError(f"K values must be positive ints, got {list(ks)!r}")
    if len(set(ks)) != len(ks):
        raise PoolkitError(f"K values must be distinct, got {list(ks)!r}")
    return ks

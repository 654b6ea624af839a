"""The settings of ``poolkit bench operator`` (:mod:`.neural_operator`): its config, presets, result files and model
names. Free of torch, so that the command's options are read without it."""

from __future__ import annotations

from dataclasses import dataclass

from poolkit.errors import PoolkitError
from poolkit.settings import Preset, Presets, check_counts, option

from .execution import Execution

MODELS = ("attention", "fno")
RESULT_FILES = ("results.csv", "results.json", "error_vs_resolution.png", "report.html")


@dataclass(frozen=True)
class OperatorConfig(Execution):
    """Every setting of a run; the defaults are the committed CPU-sized run, :data:`QUICK` a smoke test."""

    models: tuple[str, ...] = option(MODELS, "models to train", choices=MODELS)
    train: int = option(800, "training samples")
    val: int = option(100, "validation samples (they choose the epoch, at the training resolution)")
    test: int = option(200, "test samples")
    fine: int = option(512, "points of the solver's fine grid (every resolution must divide it)")
    nu: float = option(0.01, "viscosity of Burgers' equation", positive=True)
    cfl: float = 1.0
    train_resolution: int = option(64, "uniform points the models train at")
    test_resolutions: tuple[int, ...] = option((32, 64, 128, 256), "uniform test resolutions", metavar="N")
    clustered_resolutions: tuple[int, ...] = option((64, 256), "non-uniform (clustered) test resolutions",
                                                    metavar="N", empty=True)
    #: the clustered grid's spacing runs from (1 - strength) / N to (1 + strength) / N
    clustered_strength: float = 0.8
    width: int = option(32, "the attention operator's width")
    layers: int = option(3, "attention blocks")
    heads: int = option(4, "attention heads")
    fno_layers: int = option(4, "Fourier layers")
    modes: int = option(16, "Fourier modes each Fourier layer keeps")
    epochs: int = option(100, "epochs per run")
    batch_size: int = option(20, "samples per minibatch")
    lr: float = option(1e-3, "Adam learning rate", positive=True)
    seeds: int = option(3, "seeds per model")
    data_seed: int = 0
    seed: int = option(1, "first training seed")
    preset: str = "default"

    def validated(self) -> OperatorConfig:
        check_counts(self, ("train", "val", "test", "fine", "train_resolution", "width", "layers", "heads",
                            "fno_layers", "modes", "epochs", "batch_size", "seeds"))
        self.check_execution()
        unknown = [m for m in self.models if m not in MODELS]
        if unknown or not self.models:
            raise PoolkitError(f"unknown models {unknown or list(self.models)}: choose from {', '.join(MODELS)}")
        if not self.test_resolutions:
            raise PoolkitError("test_resolutions is empty: give at least one, e.g. --test-resolutions 32 64 128")
        for name, sizes in (("train_resolution", (self.train_resolution,)), ("test_resolutions",
                                                                             self.test_resolutions)):
            bad = [r for r in sizes if not isinstance(r, int) or r < 2 or self.fine % r]
            if bad:
                raise PoolkitError(f"{name} {bad} must divide the fine grid ({self.fine} points); choose divisors "
                                   f"of --fine {self.fine}")
        if any(not isinstance(r, int) or r < 2 for r in self.clustered_resolutions):
            raise PoolkitError(f"clustered_resolutions must be ints >= 2, got {list(self.clustered_resolutions)}")
        if self.width % self.heads:
            raise PoolkitError(f"width {self.width} is not divisible by heads {self.heads}; choose a multiple")
        if not 0 <= self.clustered_strength < 1:
            raise PoolkitError(f"clustered_strength must be in [0, 1), got {self.clustered_strength!r}")
        if not self.cfl > 0:
            raise PoolkitError(f"cfl must be positive, got {self.cfl!r}")
        return self

    def sizes(self) -> dict:
        """The architecture settings :func:`~.operator_model.build_model` takes."""
        return dict(layers=self.layers, heads=self.heads, fno_layers=self.fno_layers, modes=self.modes)


DEFAULT = OperatorConfig()
QUICK = OperatorConfig(train=24, val=8, test=8, fine=256, train_resolution=32, test_resolutions=(16, 32, 64),
                       clustered_resolutions=(32,), width=8, layers=1, heads=2, fno_layers=2, modes=4, epochs=2,
                       batch_size=8, seeds=2, workers=1, preset="quick")
PRESETS = Presets("default", {"default": Preset(DEFAULT),
                              "quick": Preset(QUICK, "a smoke test: tiny grids and models, 2 epochs, 2 seeds")})

"""Measures the SNR benchmark's two analytic baselines (and the mean without vector 0) on generated samples, into
docs/snr/baselines.json, beside the values the paper's code published; docs/snr.md renders them
(``scripts/docs.py --write snr``).

    .venv/bin/python scripts/snr_baselines.py
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from poolkit.io import atomic_write_json
from poolkit.provenance import run_provenance
from poolkit_bench.snr_config import PAPER_KS
from poolkit_bench.snr_data import PUBLISHED_BASELINES, baseline_mse, make_knn_centroid

OUT = Path(__file__).resolve().parent.parent / "docs" / "snr" / "baselines.json"


def measure_baselines(samples: int, seed: int) -> dict:
    data = make_knn_centroid(samples, seed=seed)
    measured: dict[str, dict[int, float]] = {name: {} for name in ("baseline_mean", "baseline_x0",
                                                                   "baseline_mean_without_x0")}
    for k in PAPER_KS:
        target = data.targets[k].double()
        for name, value in baseline_mse(data.x, data.targets[k]).items():
            measured[name][k] = value
        measured["baseline_mean_without_x0"][k] = torch.mean((data.x[:, 1:].double().mean(1) - target) ** 2).item()
    return {"script": "scripts/snr_baselines.py", "provenance": run_provenance(),
            "settings": {"samples": samples, "data_seed": seed, "num_vectors": data.x.shape[1], "dim": data.x.shape[2]},
            "measured": measured, "published": PUBLISHED_BASELINES}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=100_000, help="generated samples (default 100,000)")
    parser.add_argument("--seed", type=int, default=42, help="the data seed (default 42)")
    args = parser.parse_args(argv)
    atomic_write_json(OUT, measure_baselines(args.samples, args.seed))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()

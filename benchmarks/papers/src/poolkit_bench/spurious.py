"""``poolkit bench spurious``: Deep Attention Reweighting against Deep Feature Reweighting on a spurious cue.

The protocol of DFR (Kirichenko, Izmailov & Wilson, "Last Layer Re-Training is Sufficient for Robustness to Spurious
Correlations", ICLR 2023) on the data of :mod:`.spurious_data`. Per training agreement and seed: an ordinary CNN with
GAP (ERM) is trained on the spurious training set, its epoch chosen on a validation split of the *training*
distribution; it is frozen; then on its last maps, using only the held-out group-balanced reweighting set:

- ``erm``: the network as trained;
- ``dfr``: L1 logistic regression (liblinear) on the standardised GAP features, its C chosen on one half of the
  reweighting set by worst-group accuracy on the other, then refit on balanced subsamples of the whole set and the
  weights averaged over the retrains;
- ``attention2d``, ``adapool2d``: a fresh attention pooler + linear head trained jointly on the reweighting set
  (Chew & Wang, "Deep Attention Reweighting", 2026), its learning rate and weight decay chosen the same way;
- ``flex``: the same with flex, a learned but input-independent weighting of positions (a static control).

Scored on a test set where the cue agrees with the label half the time: worst-group and average accuracy, and the
share of each method's pooling weight on the cue's patch and on the garment, on the minority-group test images.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from poolkit.cli.options import config_from_args
from poolkit.pooling import get_pooler

from .harness import Stopwatch, results_folder, run_tasks
from .reporting import draw_map, paired_difference, print_table, pyplot, run_record, save_figure, write_outputs
from .spurious_config import CUES, DEFAULT, PRESETS, RESULT_FILES, SpuriousConfig
from .spurious_data import LABEL_NAMES, SpuriousData, SpuriousSet, make_spurious_data, planned_counts
from .vision_data import load_images
from .vision_model import Backbone, PooledHead, VisionModel, encode, fit, map_weights

METHODS = ("erm", "dfr", "attention2d", "adapool2d", "flex")
#: The methods that train a pooler + head on the frozen maps.
RETRAINED = ("attention2d", "adapool2d", "flex")
COLUMNS = ["agreement", "seed", "method", "worst_group", "average", "group_0", "group_1", "group_2", "group_3",
           "cue_mass", "garment_mass", "chosen"]
#: Worst-group test accuracy of DFR as published (Kirichenko et al. 2023, Table 1): the paper's numbers, not ours.
PAPER = {"dfr_worst_group": {"waterbirds": 92.9, "celeba": 88.3}}
#: ERM's worst group must sit at least this many points under its average, or the cue was not learned.
SANITY_POINTS = 10.0
#: Minority-group test images drawn in attention.png.
EXAMPLES = 4


# -- scores -------------------------------------------------------------------------------------------
def group_accuracies(pred: np.ndarray, y: np.ndarray, groups: np.ndarray) -> list[float]:
    """Accuracy within each group 0..3 (NaN for a group with no rows)."""
    right = np.asarray(pred) == np.asarray(y)
    return [float(right[groups == g].mean()) if (groups == g).any() else float("nan") for g in range(4)]


def worst_group(pred: np.ndarray, y: np.ndarray, groups: np.ndarray) -> float:
    """The lowest accuracy over the groups present."""
    return float(np.nanmin(group_accuracies(pred, y, groups)))


def halves(groups: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The reweighting rows split in two, each group's rows halved (a seeded shuffle): (tune on, score on)."""
    rng = np.random.default_rng(seed)
    first, second = [], []
    for g in np.unique(groups):
        rows = rng.permutation(np.flatnonzero(groups == g))
        first.append(rows[:len(rows) // 2])
        second.append(rows[len(rows) // 2:])
    return np.sort(np.concatenate(first)), np.sort(np.concatenate(second))


# -- DFR ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DFRHead:
    """DFR's last layer: standardise by the reweighting set's mean and scale, then the averaged L1 logistic weights."""

    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float
    c: float
    tuning: dict[float, float]

    def predict(self, features: np.ndarray) -> np.ndarray:
        return (((features - self.mean) / self.scale) @ self.coef + self.intercept > 0).astype(np.int64)


def fit_dfr(features: np.ndarray, y: np.ndarray, groups: np.ndarray, *, cs: tuple[float, ...], retrains: int,
            subsample: float, seed: int) -> DFRHead:
    """Deep Feature Reweighting (Kirichenko et al. 2023) on the reweighting rows only: features (N, C) GAP features.

    C: fit on one half (standardised by that half), the worst-group accuracy on the other half picks it (the first
    of ties). Then ``retrains`` fits with that C, each on ``subsample`` x the smallest group's count drawn from
    every group, standardised by the whole set; their coefficients and intercepts are averaged (DFR's code does
    the same with its 20 retrains)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    def logistic(c: float, x: np.ndarray, target: np.ndarray, state: int) -> LogisticRegression:
        return LogisticRegression(C=c, l1_ratio=1.0, solver="liblinear", random_state=state).fit(x, target)

    tune, score = halves(groups, seed)
    scaler = StandardScaler().fit(features[tune])
    tuning = {c: worst_group(logistic(c, scaler.transform(features[tune]), y[tune], seed)
                             .predict(scaler.transform(features[score])), y[score], groups[score]) for c in cs}
    best = max(cs, key=lambda c: tuning[c])  # max keeps the first of ties
    scaler = StandardScaler().fit(features)
    x = scaler.transform(features)
    rng = np.random.default_rng(seed)
    members = [np.flatnonzero(groups == g) for g in np.unique(groups)]
    draw = max(1, int(subsample * min(len(m) for m in members)))
    coefs, intercepts = [], []
    for retrain in range(retrains):
        rows = np.concatenate([rng.choice(m, draw, replace=False) for m in members])
        model = logistic(best, x[rows], y[rows], seed + retrain)
        coefs.append(model.coef_[0])
        intercepts.append(model.intercept_[0])
    return DFRHead(scaler.mean_, scaler.scale_, np.mean(coefs, axis=0), float(np.mean(intercepts)), best, tuning)


# -- attention reweighting ----------------------------------------------------------------------------
def build_head(name: str, channels: int, grid: tuple[int, int], seed: int) -> PooledHead:
    """A fresh pooler (flex sized to the map) + Linear(channels, 2), seeded."""
    torch.manual_seed(seed)
    options = {"height": grid[0], "width": grid[1]} if name == "flex" else {}
    return PooledHead(get_pooler(name, hidden_size=channels, **options), 2)


def predict(model: torch.nn.Module, x: Tensor, batch_size: int = 256) -> np.ndarray:
    """Argmax class of every row, in eval mode."""
    model.eval()
    with torch.no_grad():
        return torch.cat([model(b).argmax(1) for b in x.split(batch_size)]).numpy()


def fit_reweighted_head(name: str, maps: Tensor, y: Tensor, groups: np.ndarray, config: SpuriousConfig,
                        seed: int) -> tuple[PooledHead, dict]:
    """Deep Attention Reweighting's recipe with DFR's selection: a pooler + head trained jointly on the frozen maps
    of the reweighting rows only. Each (lr, weight decay) of the grid is trained on one half and scored by worst-group
    accuracy on the other; the best (first of ties) is retrained on the whole set, from the same initialisation."""
    tune, score = (torch.from_numpy(rows) for rows in halves(groups, seed))
    grid = tuple(maps.shape[2:])

    def train(rows: Tensor, lr: float, decay: float) -> PooledHead:
        head = build_head(name, maps.shape[1], grid, seed)
        fit(head, (maps[rows], y[rows]), None, None, epochs=config.head_epochs, batch_size=config.head_batch_size,
            lr=lr, weight_decay=decay, seed=seed)
        return head

    tuning = {}
    for lr in config.head_lrs:
        for decay in config.head_weight_decays:
            tuned = train(tune, lr, decay)
            tuning[(lr, decay)] = worst_group(predict(tuned, maps[score]), y[score].numpy(), groups[score.numpy()])
    lr, decay = max(tuning, key=tuning.get)
    return train(torch.arange(len(y)), lr, decay), {"lr": lr, "weight_decay": decay,
                                                    "tuning": [[*k, v] for k, v in tuning.items()]}


def pooling_weights(method: str, head: PooledHead | None, maps: Tensor) -> Tensor:
    """Each image's weights over the map's positions (B, h, w): the pooler's own, uniform for GAP (erm, dfr)."""
    if head is None:
        batch, _, height, width = maps.shape
        return torch.full((batch, height, width), 1.0 / (height * width))
    return map_weights(head.pooler, maps)


def mass_shares(weights: Tensor, boxes: tuple[Tensor, Tensor], canvas: int) -> tuple[float, float]:
    """Mean share of the weight on positions whose cell centre lies in the cue's box and in the garment's box:
    weights (B, h, w), boxes (B, 4) each, (top, left, bottom, right) in canvas pixels."""
    batch, height, width = weights.shape
    rows = (torch.arange(height) + 0.5) * canvas / height
    cols = (torch.arange(width) + 0.5) * canvas / width

    def share(box: Tensor) -> float:
        inside_rows = (rows[None] >= box[:, 0:1]) & (rows[None] < box[:, 2:3])  # (B, h)
        inside_cols = (cols[None] >= box[:, 1:2]) & (cols[None] < box[:, 3:4])  # (B, w)
        inside = inside_rows[:, :, None] & inside_cols[:, None, :]
        return float((weights * inside).flatten(1).sum(1).mean())

    cue, garment = boxes
    return share(cue), share(garment)


# -- one run ------------------------------------------------------------------------------------------
def retrain_on_frozen(config: SpuriousConfig, reweight: tuple[Tensor, Tensor, np.ndarray], test_maps: Tensor,
                      seed: int) -> dict[str, tuple[np.ndarray, PooledHead | DFRHead, dict]]:
    """DFR and the retrained poolers from the reweighting rows' maps (maps, y, groups) alone; then their predictions
    on ``test_maps``. Returns {method: (test predictions, fitted head, its choices)}."""
    maps, y, groups = reweight
    dfr = fit_dfr(maps.mean(dim=(2, 3)).numpy(), y.numpy(), groups, cs=config.dfr_cs, retrains=config.dfr_retrains,
                  subsample=config.dfr_subsample, seed=seed)
    out = {"dfr": (dfr.predict(test_maps.mean(dim=(2, 3)).numpy()), dfr,
                   {"C": dfr.c, "tuning": [[c, v] for c, v in dfr.tuning.items()]})}
    for name in RETRAINED:
        head, chosen = fit_reweighted_head(name, maps, y, groups, config, seed)
        out[name] = (predict(head, test_maps), head, chosen)
    return out


def _data(config: SpuriousConfig, images, agreement: float) -> SpuriousData:
    """The images of one agreement level, drawn by ``config``'s data seed."""
    return make_spurious_data(images, agreement=agreement, train_per_label=config.train_per_label,
                              val_per_label=config.val_per_label, reweight_per_group=config.reweight_per_group,
                              test_per_group=config.test_per_group, canvas=config.canvas, patch=config.patch,
                              cue=config.cue, seed=config.data_seed)


def run_one(config: SpuriousConfig, data: SpuriousData, seed: int) -> tuple[list[dict], dict]:
    """ERM, then every method on its frozen backbone: one row per method, and the run's details (curves, choices,
    the attention maps of the first minority-group test images)."""
    train, val, reweight, test = data.train, data.val, data.reweight, data.test
    torch.manual_seed(seed)
    backbone = Backbone(config.widths, float(train.x.mean()), float(train.x.std()), in_channels=train.x.shape[1])
    head = build_head("gap", config.widths[-1], (1, 1), seed + 1)
    erm = VisionModel(backbone, head)
    tic = time.perf_counter()
    result = fit(erm, (train.x, train.y), (val.x, val.y), None, epochs=config.epochs, batch_size=config.batch_size,
                 lr=config.lr, weight_decay=config.weight_decay, seed=seed)
    erm_seconds = time.perf_counter() - tic
    backbone.requires_grad_(False)
    reweight_maps, test_maps = encode(backbone, reweight.x), encode(backbone, test.x)
    tic = time.perf_counter()
    fitted = {"erm": (predict(head, test_maps), None, {"best_epoch": result.best_epoch})}
    fitted |= retrain_on_frozen(config, (reweight_maps, reweight.y, reweight.group.numpy()), test_maps, seed)
    details = {"agreement": data.agreement, "seed": seed, "erm_seconds": round(erm_seconds, 2),
               "reweight_seconds": round(time.perf_counter() - tic, 2), "erm_train_loss": result.train_loss,
               "erm_val_accuracy": result.val_accuracy, "chosen": {}, "examples": {}}
    minority = np.flatnonzero(test.group.numpy() % 3 != 0)  # groups 1 and 2: the cue disagrees with the label
    boxes = (test.cue_box[minority], test.garment_box[minority])
    shown = _examples(test, minority)
    rows = []
    for method in METHODS:
        pred, fitted_head, chosen = fitted[method]
        accuracies = group_accuracies(pred, test.y.numpy(), test.group.numpy())
        weights = pooling_weights(method, fitted_head if method in RETRAINED else None, test_maps[minority])
        cue_mass, garment_mass = mass_shares(weights, boxes, config.canvas)
        rows.append({"agreement": data.agreement, "seed": seed, "method": method,
                     "worst_group": float(np.nanmin(accuracies)), "average": float((pred == test.y.numpy()).mean()),
                     **{f"group_{g}": a for g, a in enumerate(accuracies)}, "cue_mass": cue_mass,
                     "garment_mass": garment_mass, "chosen": _chosen_text(method, chosen)})
        details["chosen"][method] = chosen
        if method in RETRAINED and seed == config.seed:  # attention.png draws the first seed's maps only
            details["examples"][method] = weights[shown].round(decimals=5).tolist()
    details["example_rows"] = minority[shown].tolist()
    return rows, details


def _examples(test: SpuriousSet, minority: np.ndarray) -> list[int]:
    """Positions in ``minority`` of the first :data:`EXAMPLES` minority images, half from each minority group."""
    groups = test.group.numpy()[minority]
    per = -(-EXAMPLES // 2)
    return sorted([*np.flatnonzero(groups == 1)[:per], *np.flatnonzero(groups == 2)[:EXAMPLES - per]])


def _chosen_text(method: str, chosen: dict) -> str:
    if method == "erm":
        return f"epoch {chosen['best_epoch'] + 1}"
    if method == "dfr":
        return f"C {chosen['C']:g}"
    return f"lr {chosen['lr']:g}, wd {chosen['weight_decay']:g}"


# -- the benchmark ------------------------------------------------------------------------------------
def run_spurious(config: SpuriousConfig = DEFAULT, out_dir: str | os.PathLike | None = None, *, force: bool = False,
                 progress: bool = True) -> tuple[pd.DataFrame, dict]:
    """Run every (agreement, seed); return one row per method (:data:`COLUMNS`) and the results' metadata (settings,
    group counts, summary, sanity check, per-run details). With ``out_dir``, also write :data:`RESULT_FILES` there;
    existing results are kept unless ``force``."""
    config = config.validated()
    with results_folder(out_dir, RESULT_FILES, force=force, settings=config) as out:
        clock = Stopwatch()
        images = load_images("fashion-mnist", config.root)
        datasets = {agreement: _data(config, images, agreement) for agreement in config.agreements}
        counts = {str(agreement): {name: getattr(data, name).counts() for name in ("train", "val", "reweight", "test")}
                  for agreement, data in datasets.items()}
        tasks = [(a, config.seed + i) for a in config.agreements for i in range(config.seeds)]
        runs = run_tasks(lambda task: run_one(config, datasets[task[0]], task[1]), tasks, threads=config.threads,
                         progress=progress, desc="spurious", unit="run")
        rows = [row for run_rows, _ in runs for row in run_rows]
        details = [run_details for _, run_details in runs]
        frame = pd.DataFrame(rows, columns=COLUMNS)
        summary = summarize(frame)
        meta = run_record(
            "spurious (Deep Attention Reweighting vs DFR, Kirichenko et al. ICLR 2023, on Fashion-MNIST garments with a "
            f"{config.cue} cue)", config, clock.record(),
            labels={"core": LABEL_NAMES, "cue": CUES[config.cue], "group": "2 * label + cue; 1 and 2 are the minority"},
            group_counts=counts,
            planned_train_counts={str(a): planned_counts(config.train_per_label, a) for a in config.agreements},
            published=PAPER, sanity=sanity(frame), summary=summary.to_dict(orient="records"), runs=details)
        if out is not None:
            _write_outputs(out, config, frame, meta)
    return frame, meta


def summarize(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (agreement, method): worst-group and average accuracy, cue and garment mass, mean and sample std over
    seeds, and the worst-group difference to DFR paired by seed (mean, sample std, the half-width of its 95%
    t-interval, and whether that interval contains 0: inside seed noise)."""
    rows = []
    for (agreement, method), group in frame.groupby(["agreement", "method"], sort=False):
        dfr = frame[(frame["agreement"] == agreement) & (frame["method"] == "dfr")].set_index("seed")["worst_group"]
        diff = (group.set_index("seed")["worst_group"] - dfr).dropna()
        row = {"agreement": float(agreement), "method": method, "seeds": len(group)}
        for column in ("worst_group", "average", "cue_mass", "garment_mass"):
            row[f"{column}_mean"] = float(group[column].mean())
            row[f"{column}_std"] = float(group[column].std(ddof=1)) if len(group) > 1 else float("nan")
        row["vs_dfr_mean"], row["vs_dfr_std"], row["vs_dfr_ci95"], inside = paired_difference(diff)
        row["inside_noise"] = bool(method != "dfr" and inside)
        rows.append(row)
    return pd.DataFrame(rows)


def sanity(frame: pd.DataFrame) -> dict:
    """Per agreement: ERM's average minus worst-group accuracy in points, per seed and on average, and whether the
    average gap reaches :data:`SANITY_POINTS` (if not, the cue was hardly learned and the comparison says little)."""
    out = {}
    for agreement, group in frame[frame["method"] == "erm"].groupby("agreement", sort=False):
        gaps = (100 * (group["average"] - group["worst_group"])).round(4).tolist()
        out[str(agreement)] = {"erm_gap_points": gaps, "mean_gap_points": float(np.mean(gaps)),
                               "required_points": SANITY_POINTS, "ok": bool(np.mean(gaps) >= SANITY_POINTS)}
    return out


# -- outputs ------------------------------------------------------------------------------------------
def _write_outputs(out: Path, config: SpuriousConfig, frame: pd.DataFrame, meta: dict) -> None:
    title = (f"{config.preset}, {config.cue} cue: CNN {'-'.join(map(str, config.widths))}, "
             f"{2 * config.train_per_label:,} training images, {config.epochs} epochs, {config.seeds} seeds")
    summary = pd.DataFrame(meta["summary"])
    write_outputs(out, frame, meta, {
        "accuracy": ("accuracy.png", lambda tmp: plot_accuracy(summary, tmp, title)),
        "where each retrained pooler looks (red box: the cue, green: the garment)": (
            "attention.png", lambda tmp: plot_attention(config, meta, tmp))},
        title=f"spurious cue ({title})", tables={"summary": summary, "runs": frame})


def plot_accuracy(summary: pd.DataFrame, path: str | os.PathLike, title: str = "") -> None:
    """Worst-group (filled) and average (open) test accuracy per method, mean +- std over seeds; one panel per
    training agreement."""
    plt = pyplot()

    agreements = list(dict.fromkeys(summary["agreement"]))
    fig, axes = plt.subplots(1, len(agreements), figsize=(4.6 * len(agreements), 3.8), dpi=150, squeeze=False)
    for ax, agreement in zip(axes[0], agreements):
        part = summary[summary["agreement"] == agreement].set_index("method").reindex(METHODS)
        at = np.arange(len(METHODS))
        ax.errorbar(at - 0.1, 100 * part["worst_group_mean"], yerr=100 * part["worst_group_std"].fillna(0), fmt="o",
                    ms=5, capsize=3, label="worst group")
        ax.errorbar(at + 0.1, 100 * part["average_mean"], yerr=100 * part["average_std"].fillna(0), fmt="o", ms=5,
                    mfc="none", capsize=3, label="average")
        ax.set_xticks(at, METHODS, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("test accuracy (%)")
        ax.set_title(f"training agreement {agreement:g}", fontsize=9)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    save_figure(fig, path, title)


def plot_attention(config: SpuriousConfig, meta: dict, path: str | os.PathLike) -> None:
    """The first run of the hardest agreement: minority-group test images (cue box red, garment box green) and each
    retrained pooler's weights over the last map laid over the image."""
    import matplotlib.patches as patches
    plt = pyplot()

    run = [r for r in meta["runs"] if r["agreement"] == max(config.agreements)][0]
    data = _data(config, load_images("fashion-mnist", config.root), run["agreement"])
    test, rows = data.test, run["example_rows"]
    fig, axes = plt.subplots(len(rows), 1 + len(RETRAINED), figsize=(2.0 * (1 + len(RETRAINED)), 2.0 * len(rows)),
                             dpi=120, squeeze=False)
    for i, row in enumerate(rows):
        panels = [("image", test.x[row].permute(1, 2, 0).squeeze(2).numpy())]
        panels += [(m, np.asarray(run["examples"][m][i])) for m in RETRAINED]
        for ax, (title, picture) in zip(axes[i], panels):
            if title == "image":
                ax.imshow(picture, cmap="gray", interpolation="nearest", extent=(0, config.canvas, config.canvas, 0))
            else:
                draw_map(ax, panels[0][1], picture, (config.canvas, config.canvas))
            for box, colour in ((test.cue_box[row], "red"), (test.garment_box[row], "lime")):
                top, left, bottom, right = box.tolist()
                ax.add_patch(patches.Rectangle((left, top), right - left, bottom - top, fill=False, ec=colour, lw=1))
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                ax.set_title(title, fontsize=8)
        label, cue = int(test.y[row]), int(test.cue[row])
        axes[i][0].set_ylabel(f"{LABEL_NAMES[label]}\n{CUES[config.cue][cue]}", fontsize=6)
    fig.suptitle(f"minority-group test images, agreement {run['agreement']:g}, seed {run['seed']}: pooling weights "
                 "(red: cue, green: garment)", fontsize=7)
    save_figure(fig, path)


# -- CLI ----------------------------------------------------------------------------------------------
def run_spurious_command(args: argparse.Namespace) -> int:
    """``poolkit bench spurious``: run, print the summary and the sanity check, write --out."""
    config = config_from_args(args, PRESETS)
    clock = Stopwatch()
    frame, meta = run_spurious(config, args.out, force=args.force, progress=not args.no_progress)
    for agreement, check in meta["sanity"].items():
        if not check["ok"]:
            print(f"WARNING: at agreement {agreement}, ERM's worst group is only {check['mean_gap_points']:.1f} points "
                  f"under its average (needed: {SANITY_POINTS:g}): the cue was hardly learned, so this comparison "
                  "says little; results.json records it", file=sys.stderr)
    print_table(f"spurious benchmark ({config.preset}, {config.cue} cue): test accuracy %, mean ± std over "
                f"{config.seeds} seeds; "
                "weight share on the cue / garment (minority test images)",
                ["agreement", "method", "worst group", "average", "worst vs dfr", "cue mass", "garment mass"],
                [[f"{row.agreement:g}", row.method, f"{100 * row.worst_group_mean:.1f} ± {100 * row.worst_group_std:.1f}",
                  f"{100 * row.average_mean:.1f} ± {100 * row.average_std:.1f}",
                  "" if row.method == "dfr" else f"{100 * row.vs_dfr_mean:+.1f} ± {100 * row.vs_dfr_std:.1f}",
                  f"{row.cue_mass_mean:.3f}", f"{row.garment_mass_mean:.3f}"]
                 for row in pd.DataFrame(meta["summary"]).itertuples(index=False)], clock, args.out)
    return 0

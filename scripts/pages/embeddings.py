"""docs/embeddings.md's numbers, rendered from docs/embeddings/zero-shot.json (``scripts/evaluate_builtin.py``),
docs/embeddings/boards.json (``scripts/compare_builtin.py``), docs/embeddings/finetuned.json
(``scripts/finetune_builtin.py``) and docs/embeddings/shuffled-seeds.json (``scripts/shuffled_seeds.py``)."""

from __future__ import annotations

from rendering import ROOT, Page, made_at, read_json, table
from verdicts import Comparison, Verdicts, last_epochs

RESULT = ROOT / "docs" / "embeddings" / "zero-shot.json"
BOARDS = ROOT / "docs" / "embeddings" / "boards.json"
FINETUNED = ROOT / "docs" / "embeddings" / "finetuned.json"
SHUFFLES = ROOT / "docs" / "embeddings" / "shuffled-seeds.json"
METRICS = {"retrieval": ("ndcg@10", "mrr@10", "map@100", "recall@1", "recall@10"),
           "similarity": ("spearman", "pearson")}
#: the figure each task's leaderboard ranks by
MAIN = {"retrieval": "ndcg@10", "similarity": "spearman"}
#: the held-out checks of the embedding issue: evaluate = sentence-transformers within PARITY; compare's zero-shot
#: mean within FOLD_GAP of evaluate's whole-table figure; the best learned row no worse than zero-shot mean by more
#: than LEARNED_LOSS; on shuffled pairs no pooler above the chance level of random rankings, paired over the shuffles
#: of docs/embeddings/shuffled-seeds.json and Holm-adjusted (``shuffle_verdicts``)
PARITY, FOLD_GAP, LEARNED_LOSS = 0.005, 0.05, 0.02
#: the shuffled-pairs check as first declared, on one shuffle: every row under chance + FIRST_CHANCE_SD standard
#: deviations of random rankings (the page says why it moved to the five shuffles)
FIRST_CHANCE_SD = 3


def ours(results: list[dict], task: str) -> list[dict]:
    return [r for r in results if r["task"] == task and "by" not in r]


def render_setup(result: dict) -> str:
    prov, runs = result["provenance"], ours(result["results"], "retrieval")[0]
    sizes = {r["data"]: (f"{r['queries']:,} queries, {r['corpus']:,} documents" if r["task"] == "retrieval" else
                         f"{r['pairs']:,} pairs") for r in result["results"] if "by" not in r}
    return (f"Made by `{result['script']}` (`docs/embeddings/zero-shot.json`): `poolkit evaluate` with the packaged "
            f"all-MiniLM-L6-v2 (max length {runs['max_length']}, batch {result['settings']['batch_size']}) and each "
            f"parameter-free pooler, no training; " + "; ".join(f"`{d}`: {s}" for d, s in sizes.items())
            + f". The whole run took {result['seconds'] / 60:.1f} minutes. Commit "
            f"{made_at(prov)}.")


def render_task(result: dict, task: str) -> str:
    rows = sorted(ours(result["results"], task), key=lambda r: -r["metrics"][MAIN[task]])
    return table(["pooler", *METRICS[task]], [[f"`{r['pooler']['name']}`", *(f"{r['metrics'][m]:.4f}"
                                                                           for m in METRICS[task])] for r in rows],
                 align="l" + "r" * len(METRICS[task]))


def parity(result: dict, task: str) -> tuple[dict, dict, float]:
    """poolkit's mean row, sentence-transformers' row and their largest difference over the task's metrics."""
    mine = next(r for r in ours(result["results"], task) if r["pooler"]["name"] == "mean")
    theirs = next(r for r in result["results"] if r["task"] == task and r.get("by") == "sentence-transformers")
    return mine, theirs, max(abs(mine["metrics"][m] - theirs["metrics"][m]) for m in METRICS[task])


def render_parity(result: dict) -> str:
    lines = []
    for task in METRICS:
        mine, theirs, largest = parity(result, task)
        lines.append([mine["data"], MAIN[task], f"{mine['metrics'][MAIN[task]]:.4f}",
                      f"{theirs['metrics'][MAIN[task]]:.4f}", f"{largest:.1e} ({len(METRICS[task])} metrics)"])
    return table(["data", "metric", "poolkit evaluate", "sentence-transformers", "largest difference, every metric"],
                 lines, align="llrrr")


def render_reading(result: dict) -> str:
    lines = []
    for task in METRICS:
        rows = sorted(ours(result["results"], task), key=lambda r: -r["metrics"][MAIN[task]])
        best, worst = rows[0], rows[-1]
        mean = next(r for r in rows if r["pooler"]["name"] == "mean")
        shown = {r["pooler"]["name"]: {m: round(v, 4) for m, v in r["metrics"].items()} for r in rows}  # as printed
        alike = [name for name in shown if name != "mean" and shown[name] == shown["mean"]]
        lines.append(f"- **{task}** (`{best['data']}`): `{best['pooler']['name']}` is first by {MAIN[task]} "
                     f"({best['metrics'][MAIN[task]]:.4f}), `{worst['pooler']['name']}` last "
                     f"({worst['metrics'][MAIN[task]]:.4f}); mean pooling, the checkpoint's own, "
                     + ("is the best" if shown[best["pooler"]["name"]] == shown["mean"] else
                        f"is {best['metrics'][MAIN[task]] - mean['metrics'][MAIN[task]]:.4f} below the best")
                     + (f"; {', '.join(f'`{n}`' for n in alike)} scores exactly as mean (a text's vector scaled by a "
                        "number of its own: the cosine does not change)." if alike else "."))
    return "\n".join(lines)


def trained(row: dict) -> bool:
    return any(fold["best_epoch"] > 0 or fold["epochs_run"] > 0 for fold in row["fold_detail"])


def zero_shot_mean(board: dict) -> dict:
    return next(row for row in board["rows"] if row["pooler"] == "mean" and not trained(row))


def best_learned(board: dict) -> dict:
    return next(row for row in board["rows"] if trained(row))  # rows are ranked best first


def render_boards_setup(boards: dict) -> str:
    prov, first = boards["provenance"], next(iter(boards["boards"].values()))["settings"]
    probe = first["probe"]
    sizes = "; ".join(f"`{data}`: " + (f"{b['settings']['queries']:,} queries, {b['settings']['corpus']:,} documents"
                                       if b["settings"]["task"] == "retrieval" else f"{b['settings']['rows']:,} pairs")
                      for data, b in boards["boards"].items())
    return (f"Made by `{boards['script']}` (`docs/embeddings/boards.json`): `compare` with the packaged "
            f"all-MiniLM-L6-v2 frozen and compare's {len(first['poolers'])} default poolers; {sizes}. "
            f"{boards['settings']['folds']} folds by query, up to {probe['epochs']} epochs (patience "
            f"{probe['patience']}), batch {probe['batch_size']}, pooler learning rate {probe['pooler_lr']:g}, inner "
            f"split {probe['val_fraction']:.0%} of each fold's training queries, seed {probe['seed']}, no projection. "
            f"The whole run took {boards['seconds'] / 60:.1f} minutes. Commit "
            f"{made_at(prov)}.")


def render_board(board: dict) -> str:
    task = board["settings"]["task"]
    others = [m for m in METRICS[task] if m != MAIN[task]]
    lines = []
    for row in board["rows"]:
        wins = sum(fold["best_epoch"] == 0 for fold in row["fold_detail"])
        lines.append([str(row["rank"]), f"`{row['pooler']}`", "trained" if trained(row) else "zero-shot",
                      f"{row['mean']:.4f} ± {row['std']:.4f}", *(f"{row[m]:.4f}" for m in others),
                      f"{wins} of {len(row['fold_detail'])}" if trained(row) else "", f"{row['params']:,}",
                      f"{row['seconds']:.0f}"])
    return table(["#", "pooler", "row", f"{MAIN[task]} mean ± std", *others, "epoch 0 chosen", "params", "sec"],
                 lines, align="rllr" + "r" * len(others) + "rrr")


def render_boards_reading(boards: dict) -> str:
    lines = []
    for data, board in boards["boards"].items():
        task = board["settings"]["task"]
        mean, best = zero_shot_mean(board), best_learned(board)
        learned = [row for row in board["rows"] if trained(row)]
        above = [row for row in learned if row["mean"] > mean["mean"]]
        folds = sum(b[MAIN[task]] > m[MAIN[task]] for b, m in zip(best["fold_metrics"], mean["fold_metrics"]))
        untrained = sum(fold["best_epoch"] == 0 for row in learned for fold in row["fold_detail"])
        total = sum(len(row["fold_detail"]) for row in learned)
        lines.append(f"- **{task}** (`{data}`): the best trained row, `{best['pooler']}`, is "
                     f"{best['mean'] - mean['mean']:+.4f} {MAIN[task]} from zero-shot mean ({best['mean']:.4f} against "
                     f"{mean['mean']:.4f}; higher in {folds} of {len(best['fold_metrics'])} folds); {len(above)} of "
                     f"{len(learned)} trained rows are above zero-shot mean; epoch 0 (no training) was chosen in "
                     f"{untrained} of the trained rows' {total} folds.")
    return "\n".join(lines)


def render_cost(boards: dict) -> str:
    cost = boards["cost"]
    settings = cost["settings"]
    names = ", ".join(f"`{spec['name']}`" for spec in settings["poolers"])
    return (f"Cost: `compare` on `{cost['data']}` ({settings['rows']:,} pairs, {settings['texts']:,} distinct texts) with "
            f"{len(settings['poolers'])} poolers ({names}), "
            f"{boards['settings']['folds']} folds, a fresh feature cache: {cost['wall_seconds']:.0f} s wall on "
            f"{boards['provenance']['cores']} CPU cores, of which {settings['encode_seconds']:.0f} s encoding "
            f"(target: under 300 s, {'met' if cost['wall_seconds'] < 300 else 'missed'}).")


def render_checks(result: dict, boards: dict, shuffles: dict) -> str:
    rows = []
    for task in METRICS:
        mine, _, largest = parity(result, task)
        rows.append([f"`{mine['data']}`", "evaluate = sentence-transformers", f"≤ {PARITY}", f"{largest:.1e}",
                     _verdict(largest <= PARITY)])
        board = boards["boards"][mine["data"]]
        gap = zero_shot_mean(board)["mean"] - mine["metrics"][MAIN[task]]
        rows.append(["", f"compare's zero-shot mean − evaluate's whole table ({MAIN[task]})", f"within ± {FOLD_GAP}",
                     f"{gap:+.4f}", _verdict(abs(gap) <= FOLD_GAP)])
        loss = best_learned(board)["mean"] - zero_shot_mean(board)["mean"]
        rows.append(["", "best trained row − zero-shot mean", f"≥ −{LEARNED_LOSS}", f"{loss:+.4f}",
                     _verdict(loss >= -LEARNED_LOSS)])
    rows.append(shuffle_check(shuffles))
    return table(["data", "check", "target", "measured", "verdict"], rows, align="llrrl")


def shuffle_check(shuffles: dict) -> list[str]:
    """The checks table's row for the shuffled pairs: it fails when any pooler is above chance after Holm."""
    verdicts = shuffle_verdicts(shuffles)
    highest = max(verdicts, key=lambda verdict: verdict.mean)
    above = [verdict for verdict in verdicts if verdict.winner == verdict.comparison.a]
    return [f"`{shuffles['data']}`, documents shuffled",
            f"every pooler's ndcg@10 − chance, {len(shuffles['runs'])} shuffles (highest: `{highest.comparison.a}`)",
            "not above chance (Holm p ≥ 0.05)", f"{highest.mean:+.4f}, Holm p {highest.p_holm:.3f}",
            _verdict(not above)]


def render_shuffled(boards: dict) -> str:
    shuffled, chance = boards["shuffled"], boards["shuffled"]["chance"]
    measured = ", ".join(f"`{row['pooler']}` {row['mean']:.4f}" for row in shuffled["rows"])
    bound = chance["ndcg@10_mean"] + FIRST_CHANCE_SD * chance["ndcg@10_std"]
    over = " and ".join(f"`{row['pooler']}`" for row in shuffled["rows"] if row["mean"] >= bound)
    first = (f"The check was first declared on this one shuffle, as every row under chance + {FIRST_CHANCE_SD} sd "
             f"({bound:.4f}); that sd is the spread of random rankings on one table, not a trained pooler's spread "
             f"over shuffles. " + (
                 f"Here {over} reached that bound, and the check was "
                 f"moved to the shuffles below after that reading." if over else
                 "Every row stays under that bound too."))
    return (f"With `{shuffled['data']}` cut to one row per document ({shuffled['settings']['queries']:,} queries) and "
            f"its documents shuffled among the rows (seed {boards['settings']['seed']}), no pooler can learn anything "
            f"about a held-out query: {measured} "
            f"(nDCG@10, {boards['settings']['folds']} folds), beside {chance['ndcg@10_mean']:.4f} ± "
            f"{chance['ndcg@10_std']:.4f} for random rankings of the same table ({chance['draws']} draws). " + first)


def _verdict(ok: bool) -> str:
    return "passes" if ok else "**fails**"


def render_dims(result: dict) -> str:
    """Mean pooling's main metric at each truncation, per built-in set, beside the full width."""
    means = [next(r for r in ours(result["results"], task) if r["pooler"]["name"] == "mean") for task in METRICS]
    widths = [row["dim"] for row in means[0]["by_dim"]]
    lines = []
    for k, width in enumerate(widths):
        lines.append([str(width), *(f"{m['by_dim'][k]['metrics'][MAIN[m['task']]]:.4f}" for m in means)])
    lines.append([f"{means[0]['pooler']['hidden_size']} (all)", *(f"{m['metrics'][MAIN[m['task']]]:.4f}"
                                                                   for m in means)])
    return table(["first dims", *(f"`{m['data']}` {MAIN[m['task']]}" for m in means)], lines,
                 align="l" + "r" * len(means))


def render_finetuned_setup(finetuned: dict) -> str:
    prov, settings = finetuned["provenance"], finetuned["settings"]
    first = next(iter(finetuned["boards"].values()))["settings"]
    walls = "; ".join(f"`{data}` {board['wall_seconds'] / 60:.1f}" for data, board in finetuned["boards"].items())
    return (f"Made by `{finetuned['script']}` (`docs/embeddings/finetuned.json`): for each set, `compare` with the "
            "frozen board's best row and zero-shot mean, then `--finetune-top 1`: the encoder fine-tuned end to end "
            f"with the first of them, {settings['finetune_epochs']} epochs, encoder learning rate "
            f"{first['encoder_lr']:g}, on the frozen board's {settings['folds']} folds (seed {settings['seed']}), the "
            f"checkpoint chosen on each fold's inner split with the encoder as it came (epoch 0) among the candidates. "
            f"Minutes: {walls}. Commit {made_at(prov)}.")


def finetuned_row(board: dict) -> dict:
    return next(row for row in board["rows"] if row["mode"] == "finetuned")


def render_finetuned(finetuned: dict) -> str:
    epochs, lines = finetuned["settings"]["finetune_epochs"], []
    for data, board in finetuned["boards"].items():
        task = board["settings"]["task"]
        for row in board["rows"]:
            tuned = row["mode"] == "finetuned"
            chosen = [fold["best_epoch"] for fold in row["fold_detail"]]
            lines.append([f"`{data}`", f"`{row['pooler']}`", "fine-tuned" if tuned else
                          ("trained" if trained(row) else "zero-shot"), MAIN[task],
                          f"{row['mean']:.4f} ± {row['std']:.4f}", ", ".join(f"{e:g}" for e in chosen),
                          last_epochs(e == epochs for e in chosen) if tuned else "", f"{row['seconds']:.0f}"])
    return table(["data", "pooler", "row", "metric", "mean ± std", "epoch chosen per fold", "last epoch chosen",
                  "sec"], lines, align="llllrlll")


def finetuned_verdicts(finetuned: dict) -> Verdicts:
    """Each fine-tuned row against its own frozen row and against zero-shot mean, fold by fold (the same folds),
    Holm-adjusted together."""
    comparisons = []
    for data, board in finetuned["boards"].items():
        task, tuned = board["settings"]["task"], finetuned_row(board)
        frozen = {row["pooler"]: row for row in board["rows"] if row["mode"] != "finetuned"}
        for other in dict.fromkeys([tuned["pooler"], "mean"]):
            b = frozen[other]
            comparisons.append(Comparison(
                f"{data}:{other}", f"{tuned['pooler']} fine-tuned",
                f"{other} {'trained' if trained(b) else 'zero-shot'}",
                [m[MAIN[task]] for m in tuned["fold_metrics"]], [m[MAIN[task]] for m in b["fold_metrics"]],
                f"{MAIN[task]}, `{data}`", test_over_train=board["settings"]["test_over_train"], scale=1.0, unit="",
                digits=4))
    return Verdicts(comparisons)


def shuffle_verdicts(shuffles: dict) -> Verdicts:
    """Each pooler's nDCG@10 on the shuffled pairs against the chance level of random rankings, paired by shuffle,
    Holm-adjusted together."""
    chances = [run["chance"]["ndcg@10_mean"] for run in shuffles["runs"]]
    return Verdicts(Comparison(name, name, "chance", [run["rows"][name]["mean"] for run in shuffles["runs"]], chances,
                               "ndcg@10, documents shuffled", scale=1.0, unit="", digits=4)
                    for name in shuffles["poolers"])


def render_shuffles(shuffles: dict) -> str:
    prov = shuffles["provenance"]
    rows = [[str(run["shuffle"]), f"{run['chance']['ndcg@10_mean']:.4f} ± {run['chance']['ndcg@10_std']:.4f}",
             *(f"{run['rows'][name]['mean']:.4f}" for name in shuffles["poolers"])] for run in shuffles["runs"]]
    return "\n".join([
        f"Made by `{shuffles['script']}` (`docs/embeddings/shuffled-seeds.json`): `{shuffles['data']}` cut to one row "
        f"per document and shuffled with each of {len(shuffles['runs'])} seeds, `compare` with "
        f"{shuffles['folds']} folds each; {shuffles['seconds'] / 60:.1f} minutes. Commit "
        f"{made_at(prov)}.", "",
        table(["shuffle", "chance (random rankings)", *(f"`{name}`" for name in shuffles["poolers"])], rows,
              align="l" + "r" * (1 + len(shuffles["poolers"]))), "",
        shuffle_verdicts(shuffles).block()])


def render() -> dict[str, str]:
    result, boards, finetuned, shuffles = (read_json(RESULT), read_json(BOARDS), read_json(FINETUNED),
                                           read_json(SHUFFLES))
    tables = {f"board-{b['settings']['task']}": render_board(b) for b in boards["boards"].values()}
    return {"setup": render_setup(result), "retrieval": render_task(result, "retrieval"),
            "similarity": render_task(result, "similarity"), "parity": render_parity(result),
            "reading": render_reading(result), "dims": render_dims(result),
            "boards-setup": render_boards_setup(boards), **tables,
            "boards-reading": render_boards_reading(boards), "cost": render_cost(boards),
            "shuffled": render_shuffled(boards), "checks": render_checks(result, boards, shuffles),
            "finetuned-setup": render_finetuned_setup(finetuned), "finetuned": render_finetuned(finetuned),
            "finetuned-verdicts": finetuned_verdicts(finetuned).block(),
            "shuffles": render_shuffles(shuffles)}


PAGE = Page("docs/embeddings.md", render)

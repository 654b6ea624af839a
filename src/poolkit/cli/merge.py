"""``poolkit merge``: task arithmetic over ``poolkit train`` runs (poolkit.training.merging.merge)."""

from __future__ import annotations

import argparse

from ..training.config import MERGE_PRESETS
from .options import add_config_arguments, given_settings

HELP = "merge the task vectors of fine-tuned runs into one encoder (task arithmetic), each task keeping its head"
DESCRIPTION = ("Task arithmetic (Ilharco et al. 2023): add the runs' task vectors (fine-tuned minus base encoder "
               "weights) to the base with a scaling alpha, given or searched on the runs' inner validation rows. "
               "Writes OUT/NAME/fold_K models (one per task and fold; `poolkit predict --model OUT/NAME` works on "
               "them) and OUT/merge.json.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..training.config import SEARCHES

    parser.add_argument("--base", help="the encoder every run was fine-tuned from (default: packaged all-MiniLM-L6-v2)")
    parser.add_argument("--runs", nargs="+", required=True, metavar="RUN",
                        help="`poolkit train` --out folders (or fold_K folders), one per task")
    parser.add_argument("--names", nargs="+", metavar="NAME", help="task names, one per run (default: folder names)")
    parser.add_argument("--data", nargs="+", metavar="DATA", help="per run, the table it was trained on (file or "
                        "builtin:NAME; for a run trained with --limit, the whole table: the run's sample is drawn "
                        "again from it); needed by --alpha-search")
    how = parser.add_mutually_exclusive_group(required=True)
    how.add_argument("--alpha", type=float, nargs="+", metavar="A",
                     help="scaling of the task vectors: one shared, or one per run")
    how.add_argument("--alpha-search", nargs="?", const="shared", choices=SEARCHES,
                     help="choose alpha on the runs' inner validation rows (never their test rows): shared (default) "
                     "or per-task (coordinate search from the best shared one)")
    add_config_arguments(parser.add_argument_group("merging (poolkit.training.config.MergeConfig; unset: its "
                                                   "defaults)"), MERGE_PRESETS)
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--force", action="store_true", help="overwrite an earlier merge in --out")


def run(args: argparse.Namespace) -> int:
    from ..training.merging import merge

    alpha = None if args.alpha is None else (args.alpha[0] if len(args.alpha) == 1 else args.alpha)
    record = merge(args.runs, args.out, base=args.base, alpha=alpha, search=args.alpha_search, data=args.data,
                   names=args.names, force=args.force, **given_settings(args, MERGE_PRESETS))
    alphas = ", ".join(f"{name} {a:g}" for name, a in record["alphas"].items())
    skills = record.get("val_skill")
    shown = ("; validation skill " + ", ".join(f"{name} {s:.4f}" for name, s in skills.items())) if skills else ""
    print(f"merged {len(record['runs'])} task vectors (alpha: {alphas}, {record['chosen_by']}){shown}; "
          f"models in {args.out}")
    return 0

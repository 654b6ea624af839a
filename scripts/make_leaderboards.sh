#!/usr/bin/env bash
# Regenerates docs/leaderboards/: frozen-encoder leaderboards (15 poolers, 3 folds) on two real datasets
# shipped with poolkit, plus the top 3 poolers fine-tuned end to end. About an hour on 2 CPU cores (most of it fine-tuning).
set -euo pipefail
cd "$(dirname "$0")/.."
POOLKIT=${POOLKIT:-.venv/bin/poolkit}
common=(--folds 3 --epochs 12 --patience 3 --finetune-top 3 --finetune-epochs 2 --encoder-lr 1e-4 --force)
$POOLKIT compare --data builtin:embedded "${common[@]}" --out docs/leaderboards/wordnet-supersense
$POOLKIT compare --data builtin:embedded-depth "${common[@]}" --finetune-top 0 --out docs/leaderboards/wordnet-depth
.venv/bin/python scripts/render_leaderboards.py > docs/leaderboards.md

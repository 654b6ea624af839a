#!/usr/bin/env bash
# Regenerates docs/explain/ and docs/explain.md: adapool (the best pooler of the WordNet supersense leaderboard)
# fine-tuned end to end (encoder, pooler and head) with the packaged all-MiniLM-L6-v2 on the embedded 3,000 WordNet
# glosses (one train / test split, 2 epochs at 64 tokens, its checkpoint chosen on an inner split of the training
# rows), then explained on a sample of 300 held-out rows: faithfulness curve, top words per class; and a small
# compare run whose report (with its best learned pooler's explained texts) is screenshot with the explain report.
# These defaults made the committed files (see docs/explain.md).
set -euo pipefail
cd "$(dirname "$0")/.."
POOLKIT=${POOLKIT:-.venv/bin/poolkit}
PYTHON=${PYTHON:-.venv/bin/python}
RUN=${RUN:-runs/explain-wordnet}
# TRAIN_ARGS / EXPLAIN_ARGS: other settings, added last (e.g. a quicker run: TRAIN_ARGS="--epochs 1 --train-only
# head"; every held-out row: EXPLAIN_ARGS="--texts 0"); the result file records what was run.
$POOLKIT train --data builtin:embedded --pooler adapool --folds 1 --epochs 2 --encoder-lr 1e-4 --max-length 64 \
  --seed 0 --out "$RUN" --force ${TRAIN_ARGS:-}
# the compare report for the screenshots: three poolers with the committed WordNet leaderboard's probe settings
$POOLKIT compare --data builtin:embedded --poolers mean,attention,adapool --folds 3 --epochs 12 --seed 0 \
  --out "$RUN/compare" --force
$PYTHON scripts/explain_wordnet.py --run "$RUN" --texts 300 --ks 1 2 3 4 5 --draws 2 ${EXPLAIN_ARGS:-}
$PYTHON scripts/docs.py --write explain

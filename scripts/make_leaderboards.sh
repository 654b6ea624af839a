#!/usr/bin/env bash
# Regenerates docs/leaderboards/ and docs/leaderboards.md: `poolkit compare` (15 default poolers + the tuned
# linear baseline, frozen all-MiniLM-L6-v2, 3 folds, each fold's epoch chosen on an inner split of its training
# rows) on three real datasets, and the top 2 poolers fine-tuned end to end on the classification set; and the
# scorer ablation: the attention pooler with each scorer= on the classification set, same folds and budget.
# And compare as a decision: nine poolers and the baseline on the classification set with the 3 folds repeated 3
# times (the tests of each row against the best), the cost columns, and a learning curve over four sizes.
# Each run records its commit, machine and timings in its leaderboard.json; the page is rendered from those files.
#   scripts/make_leaderboards.sh                      # all five (about 1.75 hours on 2 CPU cores, most of it fine-tuning)
#   scripts/make_leaderboards.sh wordnet-depth        # one of: wordnet-supersense wordnet-depth fortunes scorers decision
#                                                     # recipes
set -euo pipefail
cd "$(dirname "$0")/.."
POOLKIT=${POOLKIT:-.venv/bin/poolkit}
PYTHON=${PYTHON:-.venv/bin/python}
common=(--folds 3 --epochs 12 --patience 3 --force)
run() {
  case "$1" in
    wordnet-supersense) $POOLKIT compare --data builtin:embedded "${common[@]}" --finetune-top 2 --finetune-epochs 2 \
                          --encoder-lr 1e-4 --out docs/leaderboards/wordnet-supersense ;;
    wordnet-depth) $POOLKIT compare --data builtin:embedded-depth "${common[@]}" --out docs/leaderboards/wordnet-depth ;;
    # 4,000 of the ~15k fortunes (a stratified sample): the whole set's cache and probes take hours on 2 cores
    fortunes) $POOLKIT compare --data builtin:fortunes --limit 4000 "${common[@]}" --out docs/leaderboards/fortunes ;;
    # attention's scorer= ablation (tanh is its default); no baseline row: the question is scorer against scorer
    scorers) $POOLKIT compare --data builtin:embedded "${common[@]}" --no-baseline --poolers attention \
               attention:scorer=linear attention:scorer=bilinear attention:scorer=glu attention:scorer=abmil \
               --out docs/leaderboards/scorers/wordnet-supersense ;;
    # about 15 minutes: the poolers are the board's best six, mean, cls and max
    decision) $POOLKIT compare --data builtin:embedded "${common[@]}" --repeats 3 --sizes 250,500,1000,1500 \
                --poolers adapool,attention_head,gated_attention,attention,latent,mean_max,mean,cls,max \
                --out docs/leaderboards/wordnet-supersense-repeated ;;
    # the seed recipes over the token pooler MiniLM was trained for: weighted_layer and lstm_layers take the model's
    # declared pooling (mean) on each layer, beside mean alone; 5 folds x 3 repeats (about 15 minutes)
    recipes) $POOLKIT compare --data builtin:embedded --folds 5 --epochs 12 --patience 3 --force --repeats 3 \
               --no-baseline --poolers mean,weighted_layer,lstm_layers --out docs/leaderboards/recipes ;;
    *) echo "unknown leaderboard $1: choose wordnet-supersense, wordnet-depth, fortunes, scorers, decision or recipes" >&2
       exit 2 ;;
  esac
}
for name in "${@:-wordnet-supersense wordnet-depth fortunes scorers decision recipes}"; do
  for one in $name; do run "$one"; done
done
$PYTHON scripts/docs.py --write leaderboards

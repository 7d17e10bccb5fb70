#!/usr/bin/env bash
# SVDBK rows of the DBK paper's Table 1 on protein, 5 seeds: random 70/10/20 split per seed, batch 256,
# <= 2 000 epochs, validation NLL every 10 epochs, patience 200; MAX_TIME caps each run's seconds.
# Usage: benchmarks/svdbk_protein.sh OUT_DIR [DEVICE] [PARALLEL]   (NEURALGP=command, MAX_TIME=seconds,
#        FIT_ARGS=more options for each fit, e.g. "--depth 1")
set -u
out=${1:?output folder}; device=${2:-cpu}; par=${3:-1}
mkdir -p "$out"
neuralgp=${NEURALGP:-".venv/bin/neuralgp"}
budget=${MAX_TIME:+--max-time $MAX_TIME}
printf '%s\n' 0 1 2 3 4 | xargs -P "$par" -I{} bash -c '
  f='"$out"'/protein-svdbk-{}.json
  [ -s "$f" ] && exit 0
  '"$neuralgp"' fit --dataset uci/protein --model svdbk --seed {} --device '"$device"' '"$budget"' '"${FIT_ARGS:-}"' --json --quiet \
    > "$f.tmp" 2> "$f.err" && mv "$f.tmp" "$f" && rm -f "$f.err"'

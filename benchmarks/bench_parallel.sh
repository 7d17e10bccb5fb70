#!/usr/bin/env bash
# One `neuralgp bench SUITE` process per (dataset, row, seed), JOBS at a time (1 thread each), every run capped at
# BUDGET s; datasets (comma-separated) and rows in the order given (put the longest first); the records are merged
# into OUT/results.jsonl and the table rewritten. A job whose folder already holds a record is not run again.
# Usage: ROWS=$'GP\nDBK\n...' benchmarks/bench_parallel.sh SUITE DATASET[,DATASET...] OUT [BUDGET] [JOBS] [DEVICE]
#        SEEDS="0 1 2 3 4" by default; SEEDS=suite runs each (dataset, row) with the suite's own seeds in one job.
#        BENCH_ARGS = more options, e.g. --quick; NEURALGP = the command that runs neuralgp (.venv/bin/neuralgp).
set -u
usage="usage: ROWS=... $0 SUITE DATASET[,DATASET...] OUT [BUDGET] [JOBS] [DEVICE]"
suite=${1:?$usage}; datasets=${2:?$usage}; out=${3:?$usage}; budget=${4:-1800}; par=${5:-2}; device=${6:-cpu}
[ -n "${ROWS:-}" ] || { echo "ROWS is empty: give the suite's row names, one per line; $usage" >&2; exit 2; }
[[ $par =~ ^[1-9][0-9]*$ ]] || { echo "bad JOBS '$par': a whole number >= 1; $usage" >&2; exit 2; }
neuralgp=${NEURALGP:-".venv/bin/neuralgp"}
seeds=${SEEDS:-0 1 2 3 4}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p "$out/jobs"
for dataset in ${datasets//,/ }; do
  while IFS= read -r row; do
    for seed in $seeds; do printf '%s\t%s\t%s\n' "$dataset" "$row" "$seed"; done
  done <<< "$ROWS"
done | xargs -P "$par" -d '\n' -I{} bash -c '
  dataset=$(cut -f1 <<< "$1"); row=$(cut -f2 <<< "$1"); seed=$(cut -f3 <<< "$1")
  dir="$2/jobs/$(tr -dc "A-Za-z0-9 -" <<< "$dataset $row $seed" | tr " " _)"
  [ -s "$dir/results.jsonl" ] && exit 0
  mkdir -p "$dir"
  seeds=(--seeds "$seed"); [ "$seed" = suite ] && seeds=()
  '"$neuralgp"' bench "$3" --datasets "$dataset" --models "$row" "${seeds[@]}" --budget "$4" --device "$5" \
    '"${BENCH_ARGS:-}"' --out "$dir" > "$dir.out" 2>&1' _ {} "$out" "$suite" "$budget" "$device"
cat "$out"/jobs/*/results.jsonl > "$out/results.jsonl"
$neuralgp bench "$suite" --report-only --out "$out" ${BENCH_ARGS:-} > /dev/null

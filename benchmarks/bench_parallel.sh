#!/usr/bin/env bash
# One `neuralgp bench SUITE` process per (row, seed), JOBS at a time (1 thread each), every run capped at BUDGET s;
# rows in the order given (put the longest first); the records are merged into OUT/results.jsonl and the
# table rewritten. A job whose folder already holds a record is not run again.
# Usage: ROWS=$'GP\nDBK\n...' benchmarks/bench_parallel.sh SUITE DATASET OUT [BUDGET] [JOBS] [DEVICE]
#        (SEEDS="0 1 2 3 4" by default; BENCH_ARGS = more options, e.g. --quick; NEURALGP = the command that runs neuralgp, default .venv/bin/neuralgp)
set -u
usage="usage: ROWS=... $0 SUITE DATASET OUT [BUDGET] [JOBS] [DEVICE]"
suite=${1:?$usage}; dataset=${2:?$usage}; out=${3:?$usage}; budget=${4:-1800}; par=${5:-2}; device=${6:-cpu}
[ -n "${ROWS:-}" ] || { echo "ROWS is empty: give the suite's row names, one per line; $usage" >&2; exit 2; }
[[ $par =~ ^[1-9][0-9]*$ ]] || { echo "bad JOBS '$par': a whole number >= 1; $usage" >&2; exit 2; }
neuralgp=${NEURALGP:-".venv/bin/neuralgp"}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p "$out/jobs"
while IFS= read -r row; do
  for seed in ${SEEDS:-0 1 2 3 4}; do printf '%s\t%s\n' "$row" "$seed"; done
done <<< "$ROWS" | xargs -P "$par" -d '\n' -I{} bash -c '
  row=$(cut -f1 <<< "$1"); seed=$(cut -f2 <<< "$1"); dir="$2/jobs/$(tr -dc "A-Za-z0-9 -" | tr " " _ <<< "$row")-$seed"
  [ -s "$dir/results.jsonl" ] && exit 0
  mkdir -p "$dir"
  '"$neuralgp"' bench "$3" --datasets "$4" --models "$row" --seeds "$seed" --budget "$5" --device "$6" '"${BENCH_ARGS:-}"' \
    --out "$dir" > "$dir.out" 2>&1' _ {} "$out" "$suite" "$dataset" "$budget" "$device"
cat "$out"/jobs/*/results.jsonl > "$out/results.jsonl"
$neuralgp bench "$suite" --report-only --out "$out" ${BENCH_ARGS:-} > /dev/null

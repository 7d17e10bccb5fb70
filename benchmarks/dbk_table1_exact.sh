#!/usr/bin/env bash
# DBK rows of the DBK paper's Table 1 (exact inference) on pol and protein, 5 seeds, paper protocol:
# random 70/10/20 split per seed, <= 10 000 full-batch iterations, validation NLL every 100, patience 2 000.
# Usage: benchmarks/dbk_table1_exact.sh OUT_DIR [DEVICE] [PARALLEL]   (NEURALGP=command to run neuralgp;
#        DATASETS="pol protein", ROWS="dbk dbk-paper dbk-c dbk-r dbk-cr" and SEEDS="0 1 2 3 4" pick a subset;
#        FIT_ARGS=more options for each fit, e.g. "--depth 1")
set -u
out=${1:?output folder}; device=${2:-cpu}; par=${3:-1}
usage="usage: $0 OUT_DIR [DEVICE] [PARALLEL]"
case $device in cpu|cuda|cuda:[0-9]*) ;; *) echo "bad DEVICE '$device': use cpu, cuda or cuda:N; $usage" >&2; exit 2;; esac
case $out in cpu|cuda|cuda:*) echo "OUT_DIR '$out' looks like a device (arguments swapped?); $usage" >&2; exit 2;; esac
[[ $par =~ ^[1-9][0-9]*$ ]] || { echo "bad PARALLEL '$par': a whole number >= 1; $usage" >&2; exit 2; }
mkdir -p "$out"
neuralgp=${NEURALGP:-".venv/bin/neuralgp"}
declare -A flags=([dbk]="" [dbk-paper]="--paper-correction" [dbk-c]="--no-correction" [dbk-r]="--rank 1"
                  [dbk-cr]="--rank 1 --no-correction")
jobs=()
for ds in ${DATASETS:-pol protein}; do
  for seed in ${SEEDS:-0 1 2 3 4}; do
    for row in ${ROWS:-dbk dbk-paper dbk-c dbk-r dbk-cr}; do
      [ -n "${flags[$row]+x}" ] || { echo "unknown row $row; use one of ${!flags[*]}" >&2; exit 2; }
      jobs+=("$ds $row $seed ${flags[$row]}")
    done
  done
done
printf '%s\n' "${jobs[@]}" | xargs -P "$par" -I{} bash -c '
  set -- {}; ds=$1; name=$2; seed=$3; shift 3
  f='"$out"'/$ds-$name-$seed.json
  [ -s "$f" ] && exit 0
  '"$neuralgp"' fit --dataset uci/$ds --model dbk --seed $seed --device '"$device"' --json --quiet '"${FIT_ARGS:-}"' "$@" > "$f.tmp" 2> "$f.err" && mv "$f.tmp" "$f" && rm -f "$f.err"'

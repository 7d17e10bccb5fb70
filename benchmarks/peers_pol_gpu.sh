#!/usr/bin/env bash
# GPyTorch peers on pol, one harness process per model in parallel on one GPU (each run capped by BUDGET s).
# Usage: benchmarks/peers_pol_gpu.sh OUT SEEDS BUDGET   (NEURALGP=command to run neuralgp)
set -u
out=${1:?}; seeds=${2:-0}; budget=${3:-450}
neuralgp=${NEURALGP:-".venv/bin/neuralgp"}
for m in GP sGP DKL sDKL SVGP SVDKL; do
  $neuralgp bench dbk-table1 --datasets uci/pol --models "$m" --seeds "$seeds" --budget "$budget" \
    --device cuda --out "$out/$m" > "$out.$m.log" 2>&1 &
done
wait
cat "$out"/*/results.jsonl > "$out/results.jsonl"

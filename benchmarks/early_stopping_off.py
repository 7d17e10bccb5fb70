"""Does early stopping on a tiny validation part make DBK over-confident? A study behind issue 14, not a suite.

DBK's default validates every 25 iterations and keeps the check of lowest recalibrated validation NLL; on the tiny
sets the validation part has 9-31 rows, so the pick is noisy. This script fits the default with
``eval_every=10**6`` instead — validation only before the first step and at the end, so the final state is kept
unless it is worse than the untrained one — on every split the calibration suite pools, with the suite's
protocol (validation part of the split, seed = split index, 60 s, 1 thread), and compares the pooled test metrics
with the suite's own records of the default (``benchmarks/results/calibration/results.jsonl``).

    NEURALGP_DATA=../shared/data OMP_NUM_THREADS=1 python benchmarks/early_stopping_off.py run OUT DATASET...
    (EVAL_EVERY=N: validate every N iterations instead, fewer checks to pick from; MODEL=dak: another registry
    model, its eval_every counted in its own steps — epochs for DAK)
    python benchmarks/early_stopping_off.py report OUT [ROW]   (ROW: the suite's row to compare with, default DBK)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import torch

from neuralgp.bench.calibration import calibrated, pooled
from neuralgp.bench.suites.calibration import split_of, splits_of
from neuralgp.datasets import load
from neuralgp.metrics import coverage, mean_z2, nll, rmse
from neuralgp.registry import build

RECORDS = Path(__file__).parent / "results" / "calibration" / "results.jsonl"


def run(out: Path, datasets: list[str]):
    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    for dataset in datasets:
        for seed in splits_of(dataset):
            path = out / f"{dataset.replace('/', '_')}_{seed}.json"
            if path.exists():
                continue
            d = load(dataset, split=split_of(dataset, seed), seed=seed)  # as the suite's runner
            model = build(os.environ.get("MODEL", "dbk"), verbose=False, max_time=60.0, seed=seed,
                          eval_every=int(os.environ.get("EVAL_EVERY", 10 ** 6)))
            model.fit(d.X_train, d.y_train, d.X_val, d.y_val)
            mean, std = model.predict(d.X_test, return_std=True)
            scale = d.y_train.std()  # the suite's metrics: targets standardised by the training part
            path.write_text(json.dumps({"r": ((d.y_test - mean) / scale).tolist(), "sd": (std / scale).tolist(),
                                        "iterations": model.n_iter_}))
            print(path.name, flush=True)


def report(out: Path, row: str = "DBK"):
    suite = {}
    for line in open(RECORDS):
        r = json.loads(line)
        if r["model"] == row:
            suite[r["dataset"], r["seed"]] = r
    groups = {}
    for f in out.glob("*.json"):
        *stem, seed = f.stem.split("_")
        groups.setdefault("_".join(stem).replace("_", "/", 1), []).append((int(seed), json.loads(f.read_text())))
    print("set\tsplits\tcoverage (off / default)\tmean z²\tNLL\tRMSE\tcalibrated")
    for dataset, fits in sorted(groups.items()):
        r = np.concatenate([z["r"] for _, z in fits])
        sd = np.concatenate([z["sd"] for _, z in fits])
        off = {"n_test": len(r), "coverage_95": coverage(r, 0 * r, sd, 0.95), "mean_z2": mean_z2(r, 0 * r, sd),
               "nll": np.mean([nll(z["r"], 0 * np.asarray(z["r"]), z["sd"]) for _, z in fits]),
               "rmse": np.mean([rmse(z["r"], 0 * np.asarray(z["r"])) for _, z in fits])}
        default = pooled([suite[dataset, seed] for seed, _ in fits])  # the suite's pooling of the same splits
        print(f"{dataset}\t{len(fits)}\t" + "\t".join(f"{off[k]:{fmt}} / {default[k]:{fmt}}" for k, fmt in
                                                   (("coverage_95", ".3f"), ("mean_z2", ".2f"), ("nll", ".3f"),
                                                    ("rmse", ".3f")))
              + f"\t{'yes' if calibrated(off) else 'no'} / {'yes' if calibrated(default) else 'no'}")

if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(Path(sys.argv[2]), sys.argv[3:])
    else:
        report(Path(sys.argv[2]), *sys.argv[3:4])

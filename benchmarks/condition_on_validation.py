"""Does DBK gain from conditioning its posterior on the validation rows too? A study behind issue 14, not a suite.

DBK's ``fit`` trains the network on the training part, stops early and sets α on the validation part (or cross-fits
α on all rows when that part is under 100 rows), and its posterior is conditioned on the training part alone. Each
fit here is scored twice on the test part: as fitted, and after ``fit_posterior`` on the training and validation
rows together (the feature map, σ², α and ν as fitted) — a paired comparison at no extra training. Mode ``val``:
``fit`` with the split's validation part (the calibration suite's row "DBK"); ``plain``: ``fit(X, y)`` on both parts
(row "DBK (plain fit)", which holds out its own 10 %). The suite's protocol: seed = split index, 60 s, 1 thread.

    NEURALGP_DATA=../shared/data OMP_NUM_THREADS=1 python benchmarks/condition_on_validation.py run OUT.jsonl \
        MODE:DATASET:SPLIT...
    python benchmarks/condition_on_validation.py report OUT.jsonl...   (a TSV of the pairs, then the mean changes)
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np

from neuralgp.bench.evaluate import _scores
from neuralgp.bench.suites.calibration import split_of
from neuralgp.datasets import load
from neuralgp.datasets.rows import ArrayRows
from neuralgp.registry import build

METRICS = ("rmse", "nll", "coverage_95", "mean_z2")


def run(out: str, jobs: list[str]):
    for job in jobs:
        mode, dataset, split = job.split(":")
        ds = load(dataset, split=split_of(dataset, int(split)), seed=int(split))
        model = build("dbk", verbose=False, max_time=60, seed=int(split))
        X_all, y_all = np.vstack([ds.X_train, ds.X_val]), np.concatenate([ds.y_train, ds.y_val])
        t0 = time.perf_counter()
        model.fit(ds.X_train, ds.y_train, ds.X_val, ds.y_val) if mode == "val" else model.fit(X_all, y_all)
        record = {"dataset": dataset, "split": int(split), "mode": mode, "seconds": time.perf_counter() - t0,
                  "alpha": model.variance_scale, "df": model.predictive_df,
                  "rule": getattr(model, "recalibrated_by_", None)}
        for tag in ("before", "after"):
            if tag == "after":
                model.fit_posterior(ArrayRows(X_all, y_all))
            mean, std = model.predict(ds.X_test, return_std=True)
            scores = _scores(ds, mean, std, model.predictive_df)
            record[tag] = {k: scores[k] for k in METRICS}
        with open(out, "a") as f:
            f.write(json.dumps(record) + "\n")


def report(paths: list[str]):
    records = [json.loads(line) for path in paths for line in open(path)]
    print("\t".join(["mode", "dataset", "split", *(f"{k} {t}" for k in METRICS for t in ("before", "after"))]))
    for r in records:
        print("\t".join([r["mode"], r["dataset"], str(r["split"]),
                         *(f"{r[t][k]:.4f}" for k in METRICS for t in ("before", "after"))]))
    for mode in ("val", "plain"):
        pairs = [r for r in records if r["mode"] == mode]
        if len(pairs) < 2:
            continue
        for k in ("nll", "rmse"):
            d = [r["after"][k] - r["before"][k] for r in pairs]
            print(f"# {mode}: {len(d)} fits, {k} after − before {statistics.mean(d):+.4f} ± "
                  f"{statistics.stdev(d) / len(d) ** 0.5:.4f} (standard error), lower after on {sum(x < 0 for x in d)}")


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("run", "report"):
        sys.exit(__doc__)
    run(sys.argv[2], sys.argv[3:]) if sys.argv[1] == "run" else report(sys.argv[2:])

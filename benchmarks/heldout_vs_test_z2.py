"""Does a plain fit's held-out part show the test part's large errors? A study behind issue 14, not a suite.

Fits one row of the calibration suite on one split as the suite does (the plain-fit rows on the training and
validation parts together, holding out their own ``validation_fraction``), optionally with some parameters changed,
and prints one JSON line: the suite's metrics (``evaluate_regression``), α, the t's ν, and the tails of the squared
z-scores on the held-out part (after α) and on the test part — mean, median, the five largest and the share of the
sum that the largest 1 % carry — and for the three largest test errors: error and predictive sd over the training
part's target sd, and the distance to the nearest training or validation row in the model's scaled inputs (beside
the median test row's, of the first 200).

    NEURALGP_DATA=../shared/data OMP_NUM_THREADS=1 python benchmarks/heldout_vs_test_z2.py \
        uci/parkinsons "DAK (plain fit)" 1 ['{"max_epochs": 3000}']
"""

from __future__ import annotations

import json
import sys

import numpy as np
import torch
from sklearn.neighbors import NearestNeighbors

from neuralgp.bench.evaluate import evaluate_regression
from neuralgp.bench.suites.calibration import SUITES, split_of
from neuralgp.datasets import load


def tails(z2: np.ndarray) -> dict:
    z2 = np.sort(np.asarray(z2, dtype=np.float64))[::-1]
    return {"n": len(z2), "mean": round(float(z2.mean()), 3), "median": round(float(np.median(z2)), 3),
            "top5": [round(float(v), 1) for v in z2[:5]],
            "top_1pct_share": round(float(z2[:max(1, len(z2) // 100)].sum() / z2.sum()), 3)}


def main(dataset: str, row: str, split: int, params: dict):
    torch.set_num_threads(1)
    suite = SUITES[0]
    ds = load(dataset, split=split_of(dataset, split), seed=split)
    model = suite.models[row]({"seed": split}, len(ds.y_train)).set_params(verbose=False, **params)
    held = {}
    own_held_out_z2 = model._held_out_z2

    def keep_held_out_z2(X_val, y_val):  # the held-out z-scores that set α (before α)
        held["z2"] = own_held_out_z2(X_val, y_val)
        return held["z2"]

    model._held_out_z2 = keep_held_out_z2
    metrics = evaluate_regression(model, ds, merge_validation=row in suite.merge_validation)
    mean, std = model.predict(ds.X_test, return_std=True)
    alpha = getattr(model, "variance_scale_", None)
    z2 = ((ds.y_test - mean) / std) ** 2
    worst, s_y = np.argsort(z2)[::-1][:3], ds.y_train.std()
    index = NearestNeighbors(n_neighbors=1).fit(model.x_scaler_.transform(np.vstack([ds.X_train, ds.X_val])))

    def nearest(rows):  # distance from those test rows to the nearest training or validation row, scaled inputs
        return index.kneighbors(model.x_scaler_.transform(ds.X_test[rows]))[0][:, 0]

    first = np.arange(min(200, len(ds.X_test)))  # the median test row's distance: of the first 200
    print(json.dumps({"dataset": dataset, "row": row, "split": split, "params": params,
                      **{k: metrics.get(k) for k in ("rmse", "nll", "coverage_95", "mean_z2", "train_seconds",
                                                 "iterations", "best_iteration")},
                      "alpha": alpha, "rule": getattr(model, "recalibrated_by_", None),
                      "df": getattr(model, "predictive_df_", None),
                      "held_out_z2": tails(np.asarray(held["z2"]) / alpha) if "z2" in held and alpha else None,
                      "test_z2": tails(z2),
                      "worst_test": {"error_over_sd_y": np.round((ds.y_test - mean)[worst] / s_y, 2).tolist(),
                                     "sd_over_sd_y": np.round(std[worst] / s_y, 3).tolist(),
                                     "nearest_train_distance": np.round(nearest(worst), 2).tolist(),
                                     "median_test_nearest_distance": round(float(np.median(nearest(first))), 2)}}),
          flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4]) if len(sys.argv) > 4 else {})

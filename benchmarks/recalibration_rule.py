"""Which variance-recalibration rule is calibrated on more sets? A study behind issue 14, not a suite.

For each small and medium set of the calibration suite and each of its pooled splits, the model is fitted once
with ``recalibration=False`` (early stopping on the validation part as usual), and its raw validation z-scores give
two scale factors α for the predictive variance:
  - "mean z²": α = mean z² on the validation part (the library's rule, FM-GP's Algorithm 1; NLL-optimal);
  - "95 % quantile": α = (95th percentile of |z| on the validation part / 1.96)², which makes the validation
    part's 95 % interval cover 95 % (robust to a few large validation errors).
The test z-scores of all splits are pooled per set and judged by the suite's rule (neuralgp.bench.calibration).

    NEURALGP_DATA=../shared/data OMP_NUM_THREADS=1 python benchmarks/recalibration_rule.py dak [DATASET ...] > OUT.tsv
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from neuralgp.bench.calibration import MIN_POOLED_TEST, calibrated
from neuralgp.bench.suites.calibration import DATASETS, LARGE, split_of, splits_of
from neuralgp.datasets import load
from neuralgp.metrics import coverage, mean_z2
from neuralgp.registry import build

# validation (y, mean, std) → the factor α that scales the predictive variance
RULES = {"mean z²": mean_z2,
         "95 % quantile": lambda y, mean, std: float((np.quantile(np.abs(y - mean) / std, 0.95) / 1.959964) ** 2)}


def main(model: str, datasets: list[str]):
    """One row per set: RMSE on the validation and test parts (pooled, targets standardised by the training part),
    the validation coverage of the 95 % interval after the mean-z² scaling, then each rule's pooled test coverage and
    mean z² and whether the set counts as calibrated."""
    torch.set_num_threads(1)
    counts = dict.fromkeys(RULES, 0)
    print("set\tn_test\tval RMSE\ttest RMSE\tval coverage (mean z²)\t"
          + "\t".join(f"{r}: coverage\t{r}: mean z²\t{r}: ok" for r in RULES), flush=True)
    for name in datasets:
        y, mean, std = [], [], {r: [] for r in RULES}
        val_res, test_res, val_inside = [], [], []
        for seed in splits_of(name):
            d = load(name, split=split_of(name, seed))
            m = build(model, recalibration=False, verbose=False).fit(d.X_train, d.y_train, d.X_val, d.y_val)
            val = (d.y_val, *m.predict(d.X_val, return_std=True))
            mu, sd = m.predict(d.X_test, return_std=True)
            scale = np.std(d.y_train)
            val_res.append((val[0] - val[1]) / scale)
            test_res.append((d.y_test - mu) / scale)
            val_inside.append(coverage(val[0], val[1], val[2] * np.sqrt(mean_z2(*val)), 0.95) * len(val[0]))
            y.append(d.y_test)
            mean.append(mu)
            for rule, alpha in RULES.items():
                std[rule].append(sd * np.sqrt(alpha(*val)))
        y, mean = np.concatenate(y), np.concatenate(mean)
        val_res, test_res = np.concatenate(val_res), np.concatenate(test_res)
        cells = [f"{np.sqrt(np.mean(val_res ** 2)):.3f}", f"{np.sqrt(np.mean(test_res ** 2)):.3f}",
                 f"{sum(val_inside) / len(val_res):.3f}"]
        for rule in RULES:
            s = np.concatenate(std[rule])
            p = {"n_test": len(y), "coverage_95": coverage(y, mean, s, 0.95), "mean_z2": mean_z2(y, mean, s)}
            ok = calibrated(p)
            counts[rule] += ok and len(y) >= MIN_POOLED_TEST
            cells += [f"{p['coverage_95']:.3f}", f"{p['mean_z2']:.2f}", "yes" if ok else "no"]
        print(f"{name}\t{len(y)}\t" + "\t".join(cells), flush=True)
    print(f"calibrated (sets with >= {MIN_POOLED_TEST} test points)\t\t\t\t"
          + "\t".join(f"\t\t{counts[r]}" for r in RULES))


if __name__ == "__main__":
    # default: the suite's small and medium sets (uci/challenger has 13 pooled test points)
    main(sys.argv[1] if len(sys.argv) > 1 else "dak",
         sys.argv[2:] or [d for d in DATASETS if d not in LARGE and d != "uci/challenger"])

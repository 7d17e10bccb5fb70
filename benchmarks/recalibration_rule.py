"""Which variance-recalibration rule is calibrated on more sets? A study behind issue 14, not a suite.

For each small and medium set of the calibration suite and each of its pooled splits, the model is fitted once
with ``recalibration=False`` (early stopping on the validation part as usual), and its raw validation z-scores give
two scale factors α for the predictive variance:
  - "mean z²": α = mean z² on the validation part (the library's rule, FM-GP's Algorithm 1; NLL-optimal);
  - "95 % quantile": α = (95th percentile of |z| on the validation part / 1.96)², which makes the validation
    part's 95 % interval cover 95 % (robust to a few large validation errors).
The test z-scores of all splits are pooled per set and judged by the suite's rule (neuralgp.bench.calibration).

    NEURALGP_DATA=../shared/data OMP_NUM_THREADS=1 python benchmarks/recalibration_rule.py dak > OUT.tsv
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from neuralgp.bench.calibration import calibrated
from neuralgp.bench.suites.calibration import DATASETS, LARGE, split_of, splits_of
from neuralgp.datasets import load
from neuralgp.registry import build

RULES = {"mean z²": lambda z: float(np.mean(z ** 2)),
         "95 % quantile": lambda z: float((np.quantile(np.abs(z), 0.95) / 1.96) ** 2)}


def main(model: str):
    torch.set_num_threads(1)
    counts = dict.fromkeys(RULES, 0)
    print("set\tn_test\t" + "\t".join(f"{r}: coverage\t{r}: mean z²\t{r}: ok" for r in RULES), flush=True)
    for name in [d for d in DATASETS if d not in LARGE and d != "uci/challenger"]:  # challenger: 13 test points
        z_test = {r: [] for r in RULES}
        for seed in splits_of(name):
            d = load(name, split=split_of(name, seed))
            m = build(model, recalibration=False, verbose=False).fit(d.X_train, d.y_train, d.X_val, d.y_val)
            mu, sd = m.predict(d.X_val, return_std=True)
            z_val = (d.y_val - mu) / sd
            mu, sd = m.predict(d.X_test, return_std=True)
            for rule, alpha in RULES.items():
                z_test[rule].append((d.y_test - mu) / (sd * np.sqrt(alpha(z_val))))
        cells = []
        n = sum(len(z) for z in z_test["mean z²"])
        for rule in RULES:
            z = np.concatenate(z_test[rule])
            p = {"n_test": n, "coverage_95": float(np.mean(np.abs(z) < 1.959964)), "mean_z2": float(np.mean(z ** 2))}
            ok = calibrated(p)
            counts[rule] += ok and n >= 50
            cells += [f"{p['coverage_95']:.3f}", f"{p['mean_z2']:.2f}", "yes" if ok else "no"]
        print(f"{name}\t{n}\t" + "\t".join(cells), flush=True)
    print("calibrated (sets with >= 50 test points)\t\t" + "\t".join(f"\t\t{counts[r]}" for r in RULES))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "dak")

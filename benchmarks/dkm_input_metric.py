"""Which width ν_Ω for DKM's learned input metric (``DKMRegressor(input_width=…)``, App. F)? A study behind issue 17,
not a suite; chosen on the training folds only, as the layer widths were (docs/methods/dkm.md, "The default width").

Per gal/ split and candidate (``none`` = no input metric, ``d`` = the input dimension, or a number): fit
``DKMRegressor(max_iter=10, validation_fraction=0, input_width=…)`` on the split's training part (the Table 1
solver budget, uncalibrated), print the RMSE (data units) on its validation part — what the choice reads — and on
its test part (reported, never used to choose), ℒ and the fit's seconds, one tab-separated line each.

    NEURALGP_DATA=../shared/data OMP_NUM_THREADS=1 python benchmarks/dkm_input_metric.py gal/yacht 0,1 none,d,100
"""

from __future__ import annotations

import sys
import time

import numpy as np

from neuralgp import datasets
from neuralgp.metrics import rmse
from neuralgp.models import DKMRegressor


def main(dataset: str, splits: str, widths: str):
    for split in (int(s) for s in splits.split(",")):
        ds = datasets.load(dataset, split=f"gal:{split}")
        for width in widths.split(","):
            input_width = None if width == "none" else float(ds.X_train.shape[1] if width == "d" else width)
            start = time.perf_counter()
            model = DKMRegressor(max_iter=10, validation_fraction=0, input_width=input_width, verbose=False)
            model.fit(ds.X_train, ds.y_train)
            seconds = time.perf_counter() - start
            print(f"{dataset}\t{split}\t{width}\t{rmse(ds.y_val, model.predict(ds.X_val)):.4f}\t"
                  f"{rmse(ds.y_test, model.predict(ds.X_test)):.4f}\t{model.solver_log_.objective[-1]:.2f}\t"
                  f"{seconds:.0f}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])

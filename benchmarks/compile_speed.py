"""What ``compile=True`` (torch.compile of the mini-batch step: the loss and Adam) buys: seconds per epoch of the plain
network and of DAK-CF, eager and compiled, in one process, interleaved, on each set's 5-fold split 0 (the
``dak-table2`` protocol's first fold), every model at its library defaults, no early stopping.

Seconds per epoch = (time of a 110-epoch fit − time of a 10-epoch fit) / 100, so the compile (and everything a fit
does once) cancels; it is printed apart as the 10-epoch fit's excess over 10 epochs. Each (set, model) is repeated
``--reps`` times in rotated order, after one untimed fit of each (imports; the first, cold compile: later fits
compile from PyTorch's on-disk cache, which is what a user's repeated fits see). Test RMSE (data units) of the
longer fits: compiled and eager train the same model up to float rounding. One TSV row per fit on stdout.

    NEURALGP_DATA=../shared/data OMP_NUM_THREADS=1 python benchmarks/compile_speed.py uci/kin40k uci/protein uci/wine
"""

from __future__ import annotations

import argparse
import time

import torch

from neuralgp import datasets
from neuralgp.metrics import rmse
from neuralgp.models import DAKRegressor, NetworkRegressor

MODELS = {"NN": NetworkRegressor, "DAK-CF": DAKRegressor}


def fit_seconds(model, compile_, epochs, data):
    est = MODELS[model](max_epochs=epochs, compile=compile_, verbose=False)
    if model == "DAK-CF":  # the validation part unused: no early stopping, no recalibration
        est.set_params(eval_every=epochs, patience=epochs, recalibration=False)
    start = time.perf_counter()
    est.fit(data.X_train, data.y_train)
    return time.perf_counter() - start, est


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("sets", nargs="+")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("set\tmodel\tcompile\trep\ts_10_epochs\ts_110_epochs\ts_per_epoch\tonce_s\ttest_rmse", flush=True)
    for name in args.sets:
        data = datasets.load(name, "kfold:0")
        runs = [(model, compile_) for model in MODELS for compile_ in (False, True)]
        for model, compile_ in runs:  # first fits (imports, the cold compile) are not timed
            fit_seconds(model, compile_, 1, data)
        for rep in range(args.reps):
            for model, compile_ in runs[rep % len(runs):] + runs[:rep % len(runs)]:
                short, _ = fit_seconds(model, compile_, 10, data)
                long, est = fit_seconds(model, compile_, 110, data)
                per_epoch = (long - short) / 100
                error = rmse(data.y_test, est.predict(data.X_test))
                print(f"{name}\t{model}\t{compile_}\t{rep}\t{short:.2f}\t{long:.2f}\t{per_epoch:.4f}\t"
                      f"{short - 10 * per_epoch:.2f}\t{error:.4f}", flush=True)


if __name__ == "__main__":
    main()

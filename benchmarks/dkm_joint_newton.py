"""The DKM solver's sweeps against joint trust-region Newton iterations (``fit_dkm(solver="joint")``), issue 17.

Per gal/ split, the Table 1 protocol (training + validation parts, standardised, widths 300, θ learned, σ² ≥ 1e-5),
from the same initialisation: ``solver="newton"`` (the default: a sweep is one Newton–Lyapunov step per layer, then
L-BFGS on θ) and ``solver="joint"`` (3 such sweeps, then trust-region Newton on θ and the Grams together), each
for N iterations. One TSV row per iteration: ℒ, solver seconds (test scoring not counted), test RMSE (data units).
With ``--fixed-theta``: θ held at its start (``learn_hyper=False``), the Grams alone — the spec's check 10.

    NEURALGP_DATA=../shared/data OMP_NUM_THREADS=1 python benchmarks/dkm_joint_newton.py 48 gal/yacht:0 > out.tsv
    NEURALGP_DATA=../shared/data OMP_NUM_THREADS=1 python benchmarks/dkm_joint_newton.py --fixed-theta 30 gal/yacht:0
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from neuralgp import datasets
from neuralgp.datasets.scaling import Scaler
from neuralgp.dkm.prediction import predict
from neuralgp.dkm.solver import fit_dkm
from neuralgp.metrics import rmse
from neuralgp.models import DKMRegressor


def run(name: str, split: int, iterations: int, learn_hyper: bool = True):
    ds = datasets.load(name, split=f"gal:{split}")
    X, y = np.vstack([ds.X_train, ds.X_val]), np.concatenate([ds.y_train, ds.y_val])
    x_scaler, y_scaler = Scaler("standard").fit(X), Scaler("standard").fit(y[:, None])  # as DKMRegressor's fit
    obj = DKMRegressor(input_width=None)._objective(x_scaler.transform(X), y_scaler.transform(y[:, None])[:, 0])
    Xt = x_scaler.transform(ds.X_test)
    for solver in ("newton", "joint"):
        scores = []

        def progress(log, theta, grams):
            mean = predict(obj, theta, grams, Xt)[0][:, 0].numpy() * y_scaler.scale_[0] + y_scaler.shift_[0]
            scores.append(rmse(ds.y_test, mean))
        theta, _, log = fit_dkm(obj, solver=solver, max_iter=iterations, learn_hyper=learn_hyper, progress=progress)
        for i, (value, seconds, score) in enumerate(zip(log.objective, log.seconds, scores)):
            print(f"{name}\t{split}\t{solver}\t{i}\t{value:.4f}\t{seconds:.2f}\t{score:.4f}", flush=True)
        print(f"# {name} {split} {solver} θ = {np.round(theta.numpy(), 3).tolist()}", flush=True)


def main(args):
    torch.set_num_threads(1)
    learn_hyper = "--fixed-theta" not in args
    args = [a for a in args if a != "--fixed-theta"]
    print("set\tsplit\tsolver\titeration\tobjective\tseconds\ttest_rmse", flush=True)
    for item in args[1:]:
        name, splits = item.split(":")
        for split in splits.split(","):
            run(name, int(split), int(args[0]), learn_hyper)


if __name__ == "__main__":
    main(sys.argv[1:])

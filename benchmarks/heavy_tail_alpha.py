"""Rules for the variance scale α on heavy-tailed held-out z-scores: a study behind issues 14 and 15, not a suite.

DAK's default ("DAK" row of the calibration suite: the validation part given) on the seven sets with 1501–20 000
training rows, where it picks exact or the closed form. Each fit is the suite's (seed = split index, ``max_time``
600 s, 1 thread); ``run`` keeps, per split, the squared validation and test z-scores before α (standardised
units), the fitted α, γ (``selection_optimism_``), ν and the picked inference. ``report`` then sets α offline by:

  - "current": the library's, (mean z² + ½ standard error)·γ (``recalibration_scale``, ``selection_optimism``);
  - "mean": the plain validation mean z² (FM-GP's Algorithm 1);
  - "winsorised", "winsorised, no SE": the library's rule on z² capped at their 99 % quantile (what the bag's α
    does, ``winsorised``), with and without the half standard error;
  - "joint t": α and ν together by maximum likelihood of the unit-variance Student-t scaled by √α (ν in
    [``MIN_DF``, ``MAX_DF``]), where the library fits α by moments and then ν with α held;
and for each the t's ν refitted to the validation z after α (``student_t_df``; "joint t" keeps its own), the
pooled test mean z², 95 % coverage of the t's interval and mean NLL less the per-point log variance, which all
rules share (``nll*``: compare rules within a set, not across sets).

    NEURALGP_DATA=../shared/data OMP_NUM_THREADS=1 python benchmarks/heavy_tail_alpha.py run OUT SETS SPLITS
    python benchmarks/heavy_tail_alpha.py report OUT > OUT/rules.tsv
"""

from __future__ import annotations

import glob
import os
import sys
import time

import numpy as np
from scipy import optimize, stats

from neuralgp.models.base import (MAX_DF, MIN_DF, recalibration_scale, student_t_df, winsorised,
                                  z2_moments)


def run(out: str, sets: list[str], splits: list[int]) -> None:
    import neuralgp as ng
    from neuralgp.datasets import load
    os.makedirs(out, exist_ok=True)
    for split in splits:
        for name in sets:
            path = f"{out}/{name.replace('/', '_')}_{split}.npz"
            if os.path.exists(path):
                continue
            ds = load(name, split=f"mask:{split}" if name.startswith("uci/") else f"gal:{split}")
            start = time.time()
            m = ng.DAKRegressor(max_time=600, verbose=False, seed=split).fit(ds.X_train, ds.y_train, ds.X_val,
                                                                             ds.y_val)
            seconds, alpha = time.time() - start, float(m.variance_scale_)

            def z2(X, y):
                d = m.predict_dist(X)
                return (y - d["mean"]) ** 2 / (d["var_y"] / alpha)  # z² before α: scale-free
            np.savez(path + ".part.npz", zv=z2(ds.X_val, ds.y_val), zt=z2(ds.X_test, ds.y_test), alpha=alpha,
                     gamma=float(m.selection_optimism_), df=float(m.predictive_df_), inference=m.inference_,
                     seconds=seconds)
            os.replace(path + ".part.npz", path)
            print(name, split, round(seconds, 1), flush=True)


def t_logpdf(z, df):
    """Log density of the unit-variance Student-t with ``df`` degrees of freedom."""
    s = np.sqrt((df - 2) / df)
    return stats.t.logpdf(z / s, df) - np.log(s)


def joint_t(z2: np.ndarray) -> tuple[float, float]:
    """(α, ν) maximising the likelihood of the z = √z² under the unit-variance t of ν d.o.f. scaled by √α."""
    z = np.sqrt(z2)

    def loss(p):
        return -np.mean(t_logpdf(z / np.exp(p[0] / 2), np.exp(p[1])) - p[0] / 2)
    fits = [optimize.minimize(loss, [np.log(z2.mean()), np.log(df0)], method="L-BFGS-B",
                              bounds=[(None, None), (np.log(MIN_DF), np.log(MAX_DF))]) for df0 in (3, 10, 100)]
    best = min(fits, key=lambda r: r.fun)
    return float(np.exp(best.x[0])), float(np.exp(best.x[1]))


def rules(zv: np.ndarray, alpha: float, gamma: float) -> dict[str, tuple[float, float]]:
    """rule → (α, ν) on the validation z² ``zv`` of one fit."""
    alphas = {"current": alpha, "mean": zv.mean(),
              "winsorised": recalibration_scale(*z2_moments(winsorised(zv))) * gamma,
              "winsorised, no SE": winsorised(zv).mean() * gamma}
    out = {k: (a, student_t_df(np.sqrt(zv / a))) for k, a in alphas.items()}
    out["joint t"] = joint_t(zv)
    return out


def report(out: str) -> None:
    print("set\tsplits\tpicked\trule\tpooled mean z2\tcalibrated z2\tcoverage 95\tnll*\tper-split mean z2\tdf")
    for s in sorted({f.split("/")[-1].rsplit("_", 1)[0] for f in glob.glob(f"{out}/*.npz")}):
        fits = [np.load(f) for f in sorted(glob.glob(f"{out}/{s}_*.npz"))]
        per_rule = {}
        for d in fits:
            for rule, (a, df) in rules(d["zv"], float(d["alpha"]), float(d["gamma"])).items():
                zt = d["zt"] / a
                inside = np.sqrt(zt) < stats.t.ppf(0.975, df) * np.sqrt((df - 2) / df)
                per_rule.setdefault(rule, []).append((zt, inside, -t_logpdf(np.sqrt(zt), df) + np.log(a) / 2, df))
        picked = ",".join(str(d["inference"]) for d in fits)
        for rule, v in per_rule.items():
            zt = np.concatenate([x[0] for x in v])
            print(f"{s.replace('_', '/', 1)}\t{len(fits)}\t{picked}\t{rule}\t{zt.mean():.3f}\t"
                  f"{'yes' if 0.7 <= zt.mean() <= 1.5 else 'no'}\t{np.concatenate([x[1] for x in v]).mean():.3f}\t"
                  f"{np.concatenate([x[2] for x in v]).mean():.3f}\t{' '.join(f'{x[0].mean():.2f}' for x in v)}\t"
                  f"{' '.join(f'{x[3]:.1f}' for x in v)}")


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3].split(","), [int(s) for s in sys.argv[4].split(",")])
    else:
        report(sys.argv[2])

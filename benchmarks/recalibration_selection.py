"""Does early stopping on the validation part bias the variance scale α fitted on that same part? A study behind
issue 14, not a suite.

Early stopping picks, among a few hundred checkpoints, the one with the lowest *recalibrated* validation NLL, and
``fit`` then sets α = mean z² on the same validation points. On a few dozen points the pick favours checkpoints
whose validation errors happen to be small for their predicted variance, so α is optimistic. This script fits a
model on the pooled splits of the calibration suite's small and medium sets, records at every validation check
the validation and test predictions (standardised units; for models without early stopping, FM-GP and DKM, those of
the fitted state, before recalibration), and replays the selection offline under these rules:

  - "same part": the library's rule before this study (α = mean z² at the selected checkpoint);
  - "nested": α times the mean z² of each validation point predicted by the whole procedure (pick the checkpoint,
    fit α) run on the other validation points — leave-one-out, an estimate of the procedure's test mean z²;
  - "corrected": α times ``neuralgp.models.base.selection_optimism``, that leave-one-out z² over the one at the
    picked checkpoint alone (the pick's optimism without what leaving points out does by itself);
  - "corrected + ½ SE" (the library's rule since, ``recalibration_scale``) and "corrected + 1 SE": α the
    validation mean z² plus that many of its standard errors, times the same factor.
Fits use the suite's settings (60 s budget, seed = split index, 1 thread) with α left uncorrected; the test
predictions are those of the checkpoint each rule's pick keeps (all rules here keep the same one).

    NEURALGP_DATA=../shared/data OMP_NUM_THREADS=1 python benchmarks/recalibration_selection.py run dbk OUT DATASET...
    (every split the suite pools: all 10 uci masks / 20 gal splits, split 0 of the large sets; SPLITS=N: the
    first N of them; MAX_TIME=s: the fit's budget, 60 s as the suite's small sets, 300 s for its large ones;
    FITS=val: only the fit with the validation part, the large sets' one row)
    python benchmarks/recalibration_selection.py report OUT > OUT/rules.tsv
    python benchmarks/recalibration_selection.py student-t OUT > OUT/student-t.tsv

``student-t``: the library's α rule ("corrected + ½ SE") on the recorded fits, and on the same test predictions the
Gaussian against ``predictive="student_t"`` (ν fitted by ``student_t_df`` to the validation z-scores after α);
pooled per set and fit. The library cross-fits α (and ν) on validation parts under ``CROSS_FIT_BELOW`` rows; the
replay uses the validation part there too.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import torch

from neuralgp.bench.calibration import MIN_POOLED_TEST, calibrated
from neuralgp.bench.suites.calibration import split_of, splits_of
from neuralgp.datasets import load
from neuralgp.datasets.scaling import Scaler
from neuralgp.metrics import coverage, crps, mean_z2, nll
from neuralgp.models.base import NeuralGPRegressor, recalibration_scale, selection_optimism, student_t_df
from neuralgp.registry import factory


def recording(model):
    """``model`` whose every validation check also stores (criterion, validation and test residuals/variances)."""
    cls = type(model)

    class Recording(cls):
        def _validation_nll(self, val, predict_scaled, recalibrated=False, keep_points=False):
            # the NLL alone: the fit itself keeps α uncorrected (the rules are replayed from what is stored here)
            nll, (val_r, val_v) = NeuralGPRegressor._validation_nll(val, predict_scaled, recalibrated,
                                                                    keep_points=True)
            mean, _, var_y = predict_scaled(self.study_X_test)
            self.study_checks.append((nll, val_r.numpy(), val_v.numpy(), self.study_y_test - mean.cpu().numpy(),
                                      var_y.cpu().numpy()))
            return nll

    Recording.__name__ = cls.__name__
    rec = Recording(**model.get_params())
    rec.study_checks = []
    return rec


def run(name: str, out: Path, datasets: list[str]):
    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    for dataset in datasets:
        seeds = splits_of(dataset)[:int(os.environ.get("SPLITS", 0)) or None]
        for seed in seeds:
            for plain in [kind == "plain" for kind in os.environ.get("FITS", "val,plain").split(",")]:
                path = out / f"{dataset.replace('/', '_')}_{seed}_{'plain' if plain else 'val'}.npz"
                if path.exists():
                    continue
                d = load(dataset, split=split_of(dataset, seed), seed=seed)  # as the suite's runner: validation carved by seed
                model = recording(factory(name)({"verbose": False, "max_time": float(os.environ.get("MAX_TIME", 60)),
                                                 "seed": seed}, len(d.y_train)))  # as the suite: seed = split
                X, y = d.X_train, d.y_train
                if plain:  # as the suite's '(plain fit)' rows: train + validation, a random 10 % held out inside
                    X, y = np.concatenate([X, d.X_val]), np.concatenate([y, d.y_val])
                    X_tr, y_tr, X_v, y_v = model._hold_out_validation(X, y)
                else:
                    X_tr, y_tr, X_v, y_v = X, y, d.X_val, d.y_val
                xs = Scaler(model.input_scaling).fit(X_tr)
                ys = Scaler("standard").fit(y_tr[:, None])
                model.study_X_test = torch.as_tensor(xs.transform(d.X_test), dtype=torch.float32)
                model.study_y_test = ys.transform(d.y_test[:, None])[:, 0]
                if plain:
                    model.fit(X, y)
                else:
                    model.fit(X, y, d.X_val, d.y_val)
                if not model.study_checks:  # no early stopping (FM-GP, DKM): the fitted state is the one check
                    checks = []
                    for Xs, ys_ in ((X_v, y_v), (d.X_test, d.y_test)):
                        mean, _, var_y = model._predict_scaled(xs.transform(Xs))
                        checks += [ys.transform(ys_[:, None])[:, 0] - mean, var_y]
                    model.study_checks.append((0.0, *checks))
                nll, *arrays = zip(*model.study_checks)
                np.savez(path, nll=np.array(nll), val_r=np.array(arrays[0]), val_v=np.array(arrays[1]),
                         test_r=np.array(arrays[2]), test_v=np.array(arrays[3]),
                         variance_scale=model.variance_scale)
                print(path.name, len(nll), f"alpha={model.variance_scale:.3g}", flush=True)


def scale_same_part(nll, val_r, val_v):
    best = int(np.nanargmin(np.where(np.isfinite(nll), nll, np.inf)))
    return best, float(np.mean(val_r[best] ** 2 / val_v[best]))


def scale_nested(nll, val_r, val_v):
    """α times the plain leave-one-out z² of the procedure (pick on the other points, α on them)."""
    best, alpha = scale_same_part(nll, val_r, val_v)
    z2, n = val_r ** 2 / val_v, val_r.shape[1]
    loo = []
    for i in range(n):
        keep = np.arange(n) != i
        crit = np.log(val_v[:, keep]).mean(1) + np.log(z2[:, keep].mean(1))
        c = int(np.argmin(np.where(np.isfinite(crit), crit, np.inf)))
        loo.append(z2[c, i] / z2[c, keep].mean())
    return best, alpha * float(np.mean(loo))


def scale_corrected(nll, val_r, val_v):
    best, alpha = scale_same_part(nll, val_r, val_v)
    return best, alpha * selection_optimism(np.stack([val_r, val_v], axis=1), best)


def scale_upper(k):
    """"corrected" with α = the validation mean z² plus k standard errors (``recalibration_scale`` at k)."""
    def rule(nll, val_r, val_v):
        best, alpha = scale_corrected(nll, val_r, val_v)
        z2 = val_r[best] ** 2 / val_v[best]
        return best, alpha * recalibration_scale(z2.mean(), np.mean(z2 ** 2), len(z2), k) / z2.mean()
    return rule


RULES = {"same part": scale_same_part, "nested": scale_nested, "corrected": scale_corrected,
         "corrected + ½ SE": scale_upper(0.5), "corrected + 1 SE": scale_upper(1.0)}


def grouped(files) -> dict:
    """The recorded fits by (dataset, "val" | "plain"), from their file names."""
    groups = {}
    for f in files:
        *stem, seed, kind = f.stem.split("_")
        groups.setdefault(("_".join(stem).replace("_", "/", 1), kind), []).append(f)
    return groups


def report(out: Path):
    files = sorted(out.glob("*.npz"))
    groups = grouped(files)
    counts = {(r, k): 0 for r in RULES for k in ("val", "plain")}
    print("set\tfit\tsplits\tn_test\t" + "\t".join(f"{r}: coverage\t{r}: mean z²\t{r}: NLL\t{r}: ok" for r in RULES))
    for (dataset, kind), fs in sorted(groups.items()):
        cells = []
        for rule, fn in RULES.items():
            r_all, s_all = [], []
            for f in fs:
                z = np.load(f)
                best, alpha = fn(z["nll"], z["val_r"], z["val_v"])
                r_all.append(z["test_r"][best])
                s_all.append(np.sqrt(z["test_v"][best] * alpha))
            r, s = np.concatenate(r_all), np.concatenate(s_all)
            p = {"n_test": len(r), "coverage_95": coverage(r, 0 * r, s, 0.95), "mean_z2": mean_z2(r, 0 * r, s)}
            nll = float(np.mean(0.5 * np.log(2 * np.pi * s ** 2) + 0.5 * (r / s) ** 2))
            ok = calibrated(p)
            counts[rule, kind] += ok and len(r) >= MIN_POOLED_TEST
            cells += [f"{p['coverage_95']:.3f}", f"{p['mean_z2']:.2f}", f"{nll:.3f}", "yes" if ok else "no"]
        print(f"{dataset}\t{kind}\t{len(fs)}\t{len(r)}\t" + "\t".join(cells))
    for kind in ("val", "plain"):
        print(f"calibrated ({kind}, sets with >= {MIN_POOLED_TEST} test points)\t\t\t\t"
              + "\t".join(f"\t\t\t{counts[r, kind]}" for r in RULES))
    # per fit: how optimistic α was (test mean z² at the pick / α) against the factor each rule puts on α
    needed, factors = [], {r: [] for r in RULES if r != "same part"}
    for f in files:
        z = np.load(f)
        best, alpha = scale_same_part(z["nll"], z["val_r"], z["val_v"])
        needed.append(np.log(np.mean(z["test_r"][best] ** 2 / z["test_v"][best]) / alpha))
        for rule in factors:
            factors[rule].append(np.log(RULES[rule](z["nll"], z["val_r"], z["val_v"])[1] / alpha))
    print(f"per fit ({len(files)}): test mean z² / α, geometric mean {np.exp(np.mean(needed)):.3f}, median "
          f"{np.exp(np.median(needed)):.3f}; " + "; ".join(
              f"{r} factor: geometric mean {np.exp(np.mean(v)):.3f}, correlation of logs with the needed "
              f"{np.corrcoef(needed, v)[0, 1]:.2f}" for r, v in factors.items()))


def student_t(out: Path):
    groups = grouped(sorted(out.glob("*.npz")))
    shapes = ("Gaussian", "Student-t")
    print("set\tfit\tsplits\tn_test\tν (median)\t" + "\t".join(
        f"{s}: {m}" for s in shapes for m in ("NLL", "CRPS", "coverage", "ok")) + "\tmean z²\tNLL: t − Gaussian (lower on)")
    counts, gains = {s: {"val": 0, "plain": 0} for s in shapes}, []
    for (dataset, kind), fs in sorted(groups.items()):
        per_split, dfs, z2 = [], [], []  # per split: (rows, then NLL, CRPS, coverage of each shape)
        for f in fs:
            z = np.load(f)
            best, alpha = RULES["corrected + ½ SE"](z["nll"], z["val_r"], z["val_v"])
            df = student_t_df(z["val_r"][best] / np.sqrt(alpha * z["val_v"][best]))
            r, s = z["test_r"][best], np.sqrt(alpha * z["test_v"][best])
            per_split.append([len(r)] + [m(r, 0 * r, s, *a) for d in (None, df)
                                         for m, a in ((nll, (d,)), (crps, (d,)), (coverage, (0.95, d)))])
            dfs.append(df), z2.append((r / s) ** 2)
        table = np.array(per_split)
        pooled = table[:, 1:].T @ table[:, 0] / table[:, 0].sum()  # means over every test point of the splits
        n, mz2 = int(table[:, 0].sum()), float(np.concatenate(z2).mean())
        cells = []
        for i, shape in enumerate(shapes):
            ok = calibrated({"n_test": n, "coverage_95": pooled[3 * i + 2], "mean_z2": mz2})
            counts[shape][kind] += ok and n >= MIN_POOLED_TEST
            cells += [f"{pooled[3 * i]:.3f}", f"{pooled[3 * i + 1]:.4f}", f"{pooled[3 * i + 2]:.3f}", "yes" if ok else "no"]
        gain = pooled[3] - pooled[0]
        gains.append(gain)
        print(f"{dataset}\t{kind}\t{len(fs)}\t{n}\t{np.median(dfs):.3g}\t" + "\t".join(cells)
              + f"\t{mz2:.2f}\t{gain:+.3f} ({int(np.sum(table[:, 4] < table[:, 1]))} of {len(fs)})")
    for kind in ("val", "plain"):
        print(f"calibrated ({kind}, sets with >= {MIN_POOLED_TEST} test points)\t" + "\t".join(
            f"{s}: {counts[s][kind]}" for s in shapes))
    print(f"NLL lower with the t on {sum(g < 0 for g in gains)} of {len(gains)} set × fit cells; median change "
          f"{np.median(gains):+.3f}")


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[2], Path(sys.argv[3]), sys.argv[4:])
    elif sys.argv[1] == "student-t":
        student_t(Path(sys.argv[2]))
    else:
        report(Path(sys.argv[2]))

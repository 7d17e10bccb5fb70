"""Would DBK's NLL gain from averaging the fold models that cross-fitting already trains? A study behind issue 14.

Where the validation part is under 100 rows, DBK's ``fit`` retrains the model on 4/5 of all rows, five times, to
cross-fit α (``NeuralGPRegressor._cross_fit_z2``), and then throws those fold models away. Here they are kept (the
fit is otherwise the calibration suite's row "DBK": the split's validation part, seed = split index, 60 s, 1 thread)
and each fit is scored on the test part six ways, paired:
- ``single``: the fitted model as it predicts today (t with α and ν);
- ``mixture``: the equal mixture of the fitted model and the five fold models, each member the t with the fitted α and
  ν (the fold models' variances are what α was fitted on);
- ``matched``: the t of that mixture's mean and variance (mean of the members' variances plus the spread of their
  means), the same ν: what a model that returns one mean and one std would predict;
- ``matched_alpha``: the same with α on the spread of the means too (α on the whole of the unrecalibrated mixture);
- ``folds``: the equal mixture of the five fold models alone;
- ``averaged``: the t centred on the members' mean μ̄ with the variance its error would have if the members were
  calibrated: for every y, mean_m (y − μ_m)² = (y − μ̄)² + spread (the spread of the means about μ̄), so
  E(y − μ̄)² = mean_m α v_m − spread; floored at mean_m α v_m / M (members' errors correlated, ρ ≥ 0).
The mixtures' NLL is the mixture's own; their coverage and mean z² are those of their matched t.

The next design, a bag of half-data members with an α of its own, became ``DBKRegressor(bagging=…)``; its study
is ``benchmarks/bag_study.py`` (this script's ``run-bag`` and ``report-bag`` before commit 497c426).

    NEURALGP_DATA=../shared/data OMP_NUM_THREADS=1 python benchmarks/fold_ensemble.py run OUT.jsonl DATASET:SPLIT...
    python benchmarks/fold_ensemble.py report OUT.jsonl...   (a TSV of the fits, then the paired mean changes)
"""

from __future__ import annotations

import copy
import json
import statistics
import sys
import time

import numpy as np
from scipy.special import logsumexp
from scipy.stats import t as student_t

from neuralgp.bench.evaluate import _scores
from neuralgp.bench.suites.calibration import split_of
from neuralgp.datasets import load
from neuralgp.metrics import _t_scale
from neuralgp.registry import build

METRICS = ("rmse", "nll", "coverage_95", "mean_z2")
WAYS = ("single", "mixture", "matched", "matched_alpha", "folds", "averaged")


def keep_fold_models(model) -> list:
    """Make ``model``'s cross-fitting keep a copy of each fold model it fits; returns the list they go to."""
    members, make_clone = [], model._fixed_budget_clone

    class Keeper:  # fits the clone as cross-fitting asks, then keeps a copy of it
        def __init__(self, inner):
            self.inner = inner

        def fit(self, X, y):
            self.inner.fit(X, y)
            members.append(copy.deepcopy(self.inner))
            return self.inner

    model._fixed_budget_clone = lambda *rows: None if (inner := make_clone(*rows)) is None else Keeper(inner)
    return members


def mixture_nll(y, means, stds, df) -> float:
    """Mean over points of −log (1/M) Σ_m t_ν(y; μ_m, σ_m) (unit-variance t scaled to σ_m)."""
    logp = np.stack([student_t.logpdf(y, df, loc=m, scale=_t_scale(s, df)) for m, s in zip(means, stds)])
    return float(-np.mean(logsumexp(logp, axis=0) - np.log(len(means))))


def matched(means, variances):
    """(mean, variance) of the equal mixture of members (axis 0): one t's moments."""
    return means.mean(0), variances.mean(0) + means.var(0)


def fit_as_the_suite(job: str, keep_folds: bool = False, plain: bool = False):
    """The single fit (``bagging=0``) of the calibration suite's row "DBK" — or with ``plain``, "DBK (plain fit)":
    ``fit`` on the training and validation parts together — on DATASET:SPLIT: (the split, the fitted model, the
    record's first fields, its test predictions (mean, std), the fold models cross-fitting kept when
    ``keep_folds``, else None)."""
    dataset, split = job.rsplit(":", 1)
    ds = load(dataset, split=split_of(dataset, int(split)), seed=int(split))
    model = build("dbk", verbose=False, max_time=60, seed=int(split), bagging=0)
    folds = keep_fold_models(model) if keep_folds else None
    t0 = time.perf_counter()
    if plain:
        model.fit(np.concatenate([ds.X_train, ds.X_val]), np.concatenate([ds.y_train, ds.y_val]))
    else:
        model.fit(ds.X_train, ds.y_train, ds.X_val, ds.y_val)
    record = {"dataset": dataset, "split": int(split), "seconds": time.perf_counter() - t0,
              "rule": getattr(model, "recalibrated_by_", None)}
    return ds, model, record, model.predict(ds.X_test, return_std=True), folds


def read_records(paths: list[str]) -> list[dict]:
    return [json.loads(line) for path in paths for line in open(path)]


def run(out: str, jobs: list[str]):
    for job in jobs:
        ds, model, record, (mean, std), folds = fit_as_the_suite(job, keep_folds=True)
        alpha, df = model.variance_scale, model.predictive_df
        record.update(alpha=alpha, df=df, members=1 + len(folds),
                      single={k: _scores(ds, mean, std, df)[k] for k in METRICS})
        if len(folds) == 5:  # cross-fitting ran (and kept its models)
            preds = [(mean, std)] + [(m, s * np.sqrt(alpha)) for m, s in
                                     (f.predict(ds.X_test, return_std=True) for f in folds)]
            means, stds = np.array([p[0] for p in preds]), np.array([p[1] for p in preds])
            sd = ds.y_train.std()  # NLL on the training part's standardised targets, as the suite
            for way, idx in (("mixture", slice(None)), ("folds", slice(1, None))):
                centre, variance = matched(means[idx], stds[idx] ** 2)
                scores = _scores(ds, centre, np.sqrt(variance), df)
                record[way] = {k: scores[k] for k in METRICS}
                record[way]["nll"] = mixture_nll(ds.y_test / sd, means[idx] / sd, stds[idx] / sd, df)
            centre, variance = matched(means, stds ** 2)
            record["matched"] = {k: _scores(ds, centre, np.sqrt(variance), df)[k] for k in METRICS}
            scaled_std = np.sqrt((stds ** 2).mean(0) + alpha * means.var(0))
            record["matched_alpha"] = {k: _scores(ds, means.mean(0), scaled_std, df)[k] for k in METRICS}
            member_var = (stds ** 2).mean(0)
            averaged_std = np.sqrt(np.maximum(member_var - means.var(0), member_var / len(means)))
            record["averaged"] = {k: _scores(ds, means.mean(0), averaged_std, df)[k] for k in METRICS}
        with open(out, "a") as f:
            f.write(json.dumps(record) + "\n")


def paired_changes(records, way: str):
    """Print the mean change of NLL and RMSE from ``single`` to ``way`` over ``records``, with its standard error."""
    for k in ("nll", "rmse"):
        d = [r[way][k] - r["single"][k] for r in records]
        if len(d) > 1:
            print(f"# {way} − single, {k}: {statistics.mean(d):+.4f} ± {statistics.stdev(d) / len(d) ** 0.5:.4f} "
                  f"(standard error; {len(d)} fits), lower on {sum(x < 0 for x in d)}")


def report(paths: list[str]):
    records = read_records(paths)
    ensembles = [r for r in records if "averaged" in r]
    print("\t".join(["dataset", "split", *(f"{k} {w}" for k in METRICS for w in WAYS)]))
    for r in ensembles:
        print("\t".join([r["dataset"], str(r["split"]), *(f"{r[w][k]:.4f}" for k in METRICS for w in WAYS)]))
    print(f"# {len(records) - len(ensembles)} fits did not cross-fit (validation part of 100 rows or more)")
    for way in WAYS[1:]:
        paired_changes(ensembles, way)


if __name__ == "__main__":
    runs, reports = {"run": run}, {"report": report}
    if len(sys.argv) < 3 or sys.argv[1] not in runs.keys() | reports.keys():
        sys.exit(__doc__)
    runs[sys.argv[1]](sys.argv[2], sys.argv[3:]) if sys.argv[1] in runs else reports[sys.argv[1]](sys.argv[2:])

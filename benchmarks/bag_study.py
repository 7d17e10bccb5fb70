"""Which variance scale α calibrates DBK's bag (``DBKRegressor(bagging=8)``)? The study behind ``bag_z2``.

``run`` fits the calibration suite's row "DBK" on DATASET:SPLIT (``fold_ensemble.fit_as_the_suite``; ``run-plain``:
"DBK (plain fit)") — the single fit, scored on the test part — then turns that fitted model into the bag exactly
as ``fit`` does with bagging=8 (``NeuralGPRegressor._fit_bag``: four pairs of members refitted on complementary
halves of all rows for the steps early stopping kept) and scores the bag. Only fits whose α was cross-fitted
(validation part under 100 rows), where the bag costs what cross-fitting does. The out-of-bag predictions that
``bag_z2`` receives and the members' test predictions go to OUT.jsonl.SET_SPLIT.npz beside the record, so
``report-alpha`` can score other α rules on the same members without refitting: for bags of the first 1, 2, 3
and 4 pairs (2, 4, 6, 8 members), α from

- ``oob``: the plain out-of-bag z² of the k members that predict each row (the rule before ``bag_z2``);
- ``bag_z2``: those z² times one factor for the whole bag's smaller error and spread (the library's until
  2026-11-30);
- ``winsorised``: ``bag_z2``'s z² capped at their 99th percentile (``base.winsorised``, the library's since: an α
  less driven by the out-of-bag tail, which is longer than the test rows' on most sets: the quantiles below);
- ``t_mle``: α and ν together by the maximum likelihood of a Student-t of variance α on the ``bag_z2`` z-scores
  (ν down-weights the tail instead of α following it).

    NEURALGP_DATA=../shared/data OMP_NUM_THREADS=1 python benchmarks/bag_study.py run OUT.jsonl DATASET:SPLIT...
    (or run-plain: the same for the plain fit)
    python benchmarks/bag_study.py report OUT.jsonl...   (a TSV of the fits, then the paired mean changes)
    python benchmarks/bag_study.py report-alpha OUT.jsonl...   (per set: pooled test z², coverage, NLL change)
"""

from __future__ import annotations

import collections
import glob
import json
import sys
import time
from unittest import mock

import numpy as np
from scipy.optimize import minimize

from fold_ensemble import METRICS, fit_as_the_suite, matched, paired_changes, read_records
from neuralgp.bench.evaluate import _scores
from neuralgp.metrics import regression_report
from neuralgp.models import base
from neuralgp.metrics import nll
from neuralgp.models.base import MAX_DF, MIN_DF, recalibration_scale, student_t_df, z2_moments

MEMBERS = 8
RULES = ("oob", "bag_z2", "winsorised", "t_mle")
QUANTILES = (0.25, 0.5, 0.75, 0.9, 0.98)


def run(out: str, jobs: list[str], plain: bool = False):
    for job in jobs:
        ds, model, record, (mean, std), _ = fit_as_the_suite(job, plain=plain)
        record["single"] = {k: _scores(ds, mean, std, model.predictive_df)[k] for k in METRICS}
        if record["rule"] == "cross_fit":
            oob, library_rule = {}, base.bag_z2

            def keep(y, means, variances):  # what the bag's α is fitted on
                oob.update(y=y, oob_mean=means, oob_var=variances)
                return library_rule(y, means, variances)

            t0 = time.perf_counter()
            X_tr, y_tr, X_val, y_val = (model._hold_out_validation(np.concatenate([ds.X_train, ds.X_val]),
                                                                   np.concatenate([ds.y_train, ds.y_val]))
                                        if plain else (ds.X_train, ds.y_train, ds.X_val, ds.y_val))
            with mock.patch.object(base, "bag_z2", keep):  # the rows in fit's order: the same halves as its bag
                model.set_params(bagging=MEMBERS)._fit_bag(np.concatenate([X_tr, X_val]),
                                                           np.concatenate([y_tr, y_val]), len(y_tr), MEMBERS)
            members = [m.predict_dist(ds.X_test) for m in model.members_]
            np.savez(f"{out}.{record['dataset'].replace('/', '_')}_{record['split']}.npz", **oob,
                     y_test=ds.y_test, sd=ds.y_train.std(), test_mean=np.array([d["mean"] for d in members]),
                     test_var=np.array([d["var_y"] for d in members]))
            mean, std = model.predict(ds.X_test, return_std=True)
            scores = _scores(ds, mean, std, model.predictive_df)
            record.update(bag_seconds=time.perf_counter() - t0, alpha=model.variance_scale, df=model.predictive_df,
                          bagged={k: scores[k] for k in METRICS})
        with open(out, "a") as f:
            f.write(json.dumps(record) + "\n")


def report(paths: list[str]):
    bagged = [r for r in read_records(paths) if "bagged" in r]
    print("\t".join(["dataset", "split", "seconds fit", "seconds bag", "alpha", "df",
                     *(f"{k} {w}" for k in METRICS for w in ("single", "bagged"))]))
    for r in bagged:
        print("\t".join([r["dataset"], str(r["split"]), f"{r['seconds']:.1f}", f"{r['bag_seconds']:.1f}",
                         f"{r['alpha']:.3f}", f"{r['df']:.2f}",
                         *(f"{r[w][k]:.4f}" for k in METRICS for w in ("single", "bagged"))]))
    paired_changes(bagged, "bagged")


def scored_rules(fit, pairs: int) -> dict:
    """Test scores of the bag of the first ``pairs`` pairs under each α rule, on y standardised by the training part
    (as the suite's ``_scores``; the shift cancels): {rule: (NLL, mean z², 95 % coverage)}."""
    y, means, variances = fit["y"], fit["oob_mean"][:pairs], fit["oob_var"][:pairs]
    z2, plain = base.bag_z2(y, means, variances)
    alpha_plain = recalibration_scale(*z2_moments(plain))
    df = student_t_df(np.sqrt(plain / alpha_plain))
    z = np.sqrt(z2)
    t_mle = minimize(lambda p: nll(z, 0 * z, np.exp(p[0] / 2) + 0 * z, min(MIN_DF + np.exp(p[1]), MAX_DF)),
                     [np.log(z2.mean()), 1.0], method="Nelder-Mead").x
    alphas = {"oob": (alpha_plain, df), "bag_z2": (recalibration_scale(*z2_moments(z2)), df),
              "winsorised": (recalibration_scale(*z2_moments(base.winsorised(z2))), df),
              "t_mle": (np.exp(t_mle[0]), min(MIN_DF + np.exp(t_mle[1]), MAX_DF))}
    centre, variance = matched(fit["test_mean"][:2 * pairs], fit["test_var"][:2 * pairs])
    y_test, sd, out = fit["y_test"], float(fit["sd"]), {}
    for rule, (alpha, df) in alphas.items():
        scores = regression_report(y_test / sd, centre / sd, np.sqrt(alpha * variance) / sd, df)  # as _scores
        out[rule] = (scores["nll"], scores["mean_z2"], scores["coverage_95"])
    return out


def scaled_z2(fit) -> tuple[np.ndarray, np.ndarray]:
    """(the out-of-bag z² that set α, the test rows' z² of the whole bag), both over the mean of the first: where
    the two differ in shape, one α cannot serve both."""
    z2, _ = base.bag_z2(fit["y"], fit["oob_mean"], fit["oob_var"])
    centre, variance = matched(fit["test_mean"], fit["test_var"])
    return z2 / z2.mean(), (fit["y_test"] - centre) ** 2 / variance / z2.mean()


def report_alpha(paths: list[str]):
    single = {(r["dataset"], r["split"]): r["single"] for r in read_records(paths)}
    fits = {key: np.load(f) for key in single
            for f in glob.glob(f"{paths[0].rsplit('/', 1)[0]}/*.{key[0].replace('/', '_')}_{key[1]}.npz")}
    print("# mean test z2 over every fit of each set (the pooled z2: the splits' test parts are equal), by bag size")
    print("\t".join(["members", "rule", *sorted({d for d, _ in fits})]))
    scored = {(key, p): scored_rules(fit, p) for key, fit in fits.items() for p in range(1, MEMBERS // 2 + 1)}
    for p in range(1, MEMBERS // 2 + 1):
        for rule in RULES:
            by_set = collections.defaultdict(list)
            for key in fits:
                by_set[key[0]].append(scored[key, p][rule][1])
            print("\t".join([str(2 * p), rule, *(f"{np.mean(by_set[d]):.2f}" for d in sorted(by_set))]))
    print("# the whole bag against the single fit, per set: pooled mean z2, 95 % coverage, mean NLL change")
    print("\t".join(["dataset", "fits", "z2 single", *(f"z2 {r}" for r in RULES), "cov single",
                     *(f"cov {r}" for r in RULES), *(f"NLL change {r}" for r in RULES)]))
    changes = collections.defaultdict(list)
    for dataset in sorted({d for d, _ in fits}):
        keys = [k for k in fits if k[0] == dataset]
        rows = [(single[k], scored[k, MEMBERS // 2]) for k in keys]
        for rule in RULES:
            changes[rule] += [b[rule][0] - s["nll"] for s, b in rows]
        print("\t".join([dataset, str(len(keys)), f"{np.mean([s['mean_z2'] for s, _ in rows]):.2f}",
                         *(f"{np.mean([b[r][1] for _, b in rows]):.2f}" for r in RULES),
                         f"{np.mean([s['coverage_95'] for s, _ in rows]):.3f}",
                         *(f"{np.mean([b[r][2] for _, b in rows]):.3f}" for r in RULES),
                         *(f"{np.mean([b[r][0] - s['nll'] for s, b in rows]):+.3f}" for r in RULES)]))
    print("# quantiles (25, 50, 75, 90, 98 %) of the z² that set α over their mean (out of bag) and of the test rows' "
          "z² over the same mean (test), every fit of a set pooled")
    print("\t".join(["dataset", "out of bag", "test"]))
    for dataset in sorted({d for d, _ in fits}):
        oob, test = (np.concatenate(part) for part in zip(*(scaled_z2(f) for k, f in fits.items() if k[0] == dataset)))
        print("\t".join([dataset, *(" ".join(f"{q:.3g}" for q in np.quantile(z, QUANTILES)) for z in (oob, test))]))
    for rule, d in changes.items():
        print(f"# NLL {rule} − single: {np.mean(d):+.4f} ± {np.std(d, ddof=1) / np.sqrt(len(d)):.4f} "
              f"(standard error; {len(d)} fits), lower on {sum(x < 0 for x in d)}")


if __name__ == "__main__":
    commands = {"run": run, "run-plain": lambda out, jobs: run(out, jobs, plain=True), "report": report,
                "report-alpha": report_alpha}
    if len(sys.argv) < 3 or sys.argv[1] not in commands:
        sys.exit(__doc__)
    if sys.argv[1].startswith("run"):
        commands[sys.argv[1]](sys.argv[2], sys.argv[3:])
    else:
        commands[sys.argv[1]](sys.argv[2:])

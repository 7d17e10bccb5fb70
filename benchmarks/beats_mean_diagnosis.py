"""Why a baseline misses the calibration suite's "beats mean" on a set: per split, the mean predictor's own test RMSE
(the training part's mean, on the suite's standardised scale), each row's recorded test RMSE, learned noise variance
(standardised targets) and best / last iteration; then, unless --records-only, scikit-learn's GP refitted on the
training + validation parts as the suite's "sklearn GP" row (c·RBF-ARD + white noise) and with one lengthscale for all
inputs (``ard=False``), with the log marginal likelihood and noise each reaches.

    python benchmarks/beats_mean_diagnosis.py RESULTS.jsonl SET 'ROW|ROW…' [--records-only]

Used for uci/breastcancer (docs/methods/baselines.md, "Where baselines stay at the mean").
"""

import json
import sys
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from neuralgp import datasets
from neuralgp.models.sklearn_gp import SklearnGPRegressor


def split_index(split):
    return int(split.split(":")[1])


def main(path, dataset, rows, records_only):
    records = [r for r in map(json.loads, open(path)) if r["dataset"] == dataset and r["model"] in rows]
    splits = sorted({split_index(r["split"]) for r in records})
    kind = records[0]["split"].split(":")[0]
    data = {i: datasets.load(dataset, split=f"{kind}:{i}") for i in splits}
    scale = {i: data[i].y_train.std() for i in splits}

    def rmse(i, prediction):
        return float(np.sqrt(np.mean(((data[i].y_test - prediction) / scale[i]) ** 2)))

    mean_rmse = {i: rmse(i, data[i].y_train.mean()) for i in splits}
    print(f"splits {splits}; the mean predictor's test RMSE per split (standardised), then its mean:")
    print("  " + " ".join(f"{mean_rmse[i]:.3f}" for i in splits) + f"  | {np.mean(list(mean_rmse.values())):.3f}")
    for row in rows:
        by_split = {split_index(r["split"]): r for r in records if r["model"] == row}
        ran = [i for i in splits if i in by_split]
        print(f"{row} ({len(ran)} splits)")
        print("  RMSE   " + " ".join(f"{by_split[i]['rmse']:.3f}" for i in ran)
              + f"  | {np.mean([by_split[i]['rmse'] for i in ran]):.3f}"
              + f"; above the mean predictor's on {sum(by_split[i]['rmse'] > mean_rmse[i] for i in ran)}")
        print("  noise  " + " ".join(f"{by_split[i].get('noise_variance') or float('nan'):.2g}" for i in ran))
        steps = [f"{by_split[i].get('best_iteration')}/{by_split[i].get('iterations')}" for i in ran]
        print("  best/last iteration  " + " ".join(steps))
    if records_only:
        return
    print("scikit-learn GP refitted on the training + validation parts: ARD (the suite's row) | one lengthscale")
    warnings.filterwarnings("ignore", category=ConvergenceWarning)  # the noise column says when it sits at its bound
    print("split\tARD RMSE\tARD noise\tARD log ML\tlengthscales < 1\tiso RMSE\tiso noise\tiso log ML")
    for i in splits:
        ds = data[i]
        X, y = np.vstack([ds.X_train, ds.X_val]), np.concatenate([ds.y_train, ds.y_val])
        ard = SklearnGPRegressor(verbose=False).fit(X, y)
        iso = SklearnGPRegressor(ard=False, verbose=False).fit(X, y)
        lengthscales = np.atleast_1d(ard.kernel_.k1.k2.length_scale)
        print(f"{i}\t{rmse(i, ard.predict(ds.X_test)):.3f}\t{ard.kernel_.k2.noise_level:.2g}\t"
              f"{ard.gpr_.log_marginal_likelihood_value_:.1f}\t{int((lengthscales < 1).sum())} of {len(lengthscales)}\t"
              f"{rmse(i, iso.predict(ds.X_test)):.3f}\t{iso.kernel_.k2.noise_level:.2g}\t"
              f"{iso.gpr_.log_marginal_likelihood_value_:.1f}", flush=True)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--records-only"]
    if len(args) != 3:
        sys.exit(__doc__)
    main(args[0], args[1], args[2].split("|"), "--records-only" in sys.argv)

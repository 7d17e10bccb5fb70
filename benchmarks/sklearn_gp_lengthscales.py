"""scikit-learn's GP with one lengthscale for all inputs against the calibration suite's "sklearn GP" (ARD), on every
set and split where that row has a record: both fitted as the suite fits it (plain ``fit(X, y)`` on the training and
validation parts), scored on the test part. Then, per set, each row's mean RMSE and NLL (standardised targets) and
its pooled verdict, and the counts the suite reports: calibrated, and beats the mean where some model of the suite
reaches RMSE < 0.9.

    python benchmarks/sklearn_gp_lengthscales.py RESULTS.jsonl OUT.jsonl [SHARD COUNT]   # fit (SHARD of COUNT sets)
    python benchmarks/sklearn_gp_lengthscales.py RESULTS.jsonl OUT.jsonl --report       # compare

Used for docs/methods/baselines.md, "Where baselines stay at the mean".
"""

import json
import sys

from neuralgp import datasets
from neuralgp.bench.calibration import MIN_POOLED_TEST, beats_mean_predictor, calibrated, metric_by_split, pooled
from neuralgp.bench.evaluate import evaluate_regression
from neuralgp.models import SklearnGPRegressor

ARD, ONE = "sklearn GP", "sklearn GP (one lengthscale)"


def read(path):
    return [json.loads(line) for line in open(path) if line.strip()]


def fit(results, out, shard, count):
    runs = sorted({(r["dataset"], r["split"]) for r in read(results) if r["model"] == ARD and "coverage_95" in r})
    sets = sorted({d for d, _ in runs})[shard::count]
    with open(out, "a") as fh:
        for dataset, split in runs:
            if dataset in sets:
                model = SklearnGPRegressor(ard=False, verbose=False)
                record = evaluate_regression(model, datasets.load(dataset, split=split), merge_validation=True)
                record = {"model": ONE, "dataset": dataset, "split": split, "status": "ok", **record}
                fh.write(json.dumps(record) + "\n")
                fh.flush()


def report(results, out):
    ours = read(out)
    done = {(r["dataset"], r["split"]) for r in ours}
    records = [r for r in read(results) + ours if (r["dataset"], r["split"]) in done]  # the splits both rows ran
    rmses = metric_by_split(records, "rmse")
    counts = {ARD: [0, 0, 0, 0], ONE: [0, 0, 0, 0]}  # calibrated, counted, beats mean, with signal
    print("set\tsplits\tARD RMSE / NLL / verdict\tone lengthscale RMSE / NLL / verdict")
    for dataset in sorted({d for d, _ in done}):
        cells = []
        for row in (ARD, ONE):
            p = pooled([r for r in records if r["dataset"] == dataset and r["model"] == row])
            ok = calibrated(p)
            if p["n_test"] >= MIN_POOLED_TEST:
                counts[row][0] += ok
                counts[row][1] += 1
                beats = beats_mean_predictor(rmses, dataset, row)
                if beats is not None:
                    counts[row][2] += beats
                    counts[row][3] += 1
            cells.append(f"{p['rmse']:.3f} / {p['nll']:.3f} / {p['coverage_95']:.3f} {p['mean_z2']:.2f} "
                         f"{'✓' if ok else '✗'}")
        print(f"{dataset}\t{p['splits']}\t" + "\t".join(cells))
    for row, (ok, n, beats, with_signal) in counts.items():
        print(f"{row}: calibrated {ok}/{n}; beats mean {beats}/{with_signal}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[3] == "--report":
        report(sys.argv[1], sys.argv[2])
    elif len(sys.argv) in (3, 5):
        fit(sys.argv[1], sys.argv[2], *(map(int, sys.argv[3:]) if len(sys.argv) == 5 else (0, 1)))
    else:
        sys.exit(__doc__)

"""Two rows of a suite's records on the same splits: per set, RMSE, NLL (Δ ± standard error, on how many splits the
new row is lower), pooled 95 % coverage / mean z² with the calibration suite's verdict, the median Student-t ν and the
median training seconds.

    python benchmarks/pair_rows.py RESULTS.jsonl ROW_NEW ROW_OLD [OLD_RESULTS.jsonl]

Used for the Student-t rows against their Gaussian twins (the same fits: ``Suite.gaussian_twins``), and, with
OLD_RESULTS (ROW_OLD's records are read from there: e.g. ``git show COMMIT:…/results.jsonl``), for a row against its
own records before a change. Prints a markdown table and a one-line summary.
"""

import collections
import json
import sys

import numpy as np

from neuralgp.bench.calibration import MIN_POOLED_TEST, calibrated, pooled


def by_set(path, model):
    rows = collections.defaultdict(dict)
    for line in open(path):
        if line.strip():
            r = json.loads(line)
            if r["model"] == model and r["status"] in ("ok", "time-capped"):
                rows[r["dataset"]][r["split"]] = r
    return rows


def verdict(records):
    """The suite's pooled coverage and mean z² (``neuralgp.bench.calibration.pooled``) and their printed verdict."""
    p = pooled(records)
    return p, f"{p['coverage_95']:.3f} / {p['mean_z2']:.2f}{'' if calibrated(p) else ' ✗'}"


def main(path, new_row, old_row, old_path=None):
    new, old = by_set(path, new_row), by_set(old_path or path, old_row)
    print(f"| set | splits | RMSE: {old_row} → {new_row} | NLL (Δ ± se, lower on) | cov. / mean z² | ν (median) "
          "| s a fit (median) |")
    print("|---|---|---|---|---|---|---|")
    counted = lower = 0
    verdicts = [0, 0]
    for dataset in sorted(new):
        a, b = new[dataset], old.get(dataset, {})
        common = sorted(set(a) & set(b), key=lambda s: int(s.split(":")[1]) if ":" in s else 0)
        if not common:
            continue
        dn = np.array([a[s]["nll"] - b[s]["nll"] for s in common])
        se = dn.std(ddof=1) / np.sqrt(len(dn)) if len(dn) > 1 else float("nan")
        (pa, ta), (pb, tb) = verdict([a[s] for s in common]), verdict([b[s] for s in common])
        if pa["n_test"] >= MIN_POOLED_TEST:
            counted += 1
            lower += dn.mean() < 0
            verdicts[0] += calibrated(pb)
            verdicts[1] += calibrated(pa)
        nus = [a[s]["predictive_df"] for s in common if a[s].get("predictive_df") is not None]
        seconds = [np.median([r[s]["train_seconds"] for s in common]) for r in (b, a)]
        print(f"| {dataset} | {len(common)} | {np.mean([b[s]['rmse'] for s in common]):.4f} → "
              f"{np.mean([a[s]['rmse'] for s in common]):.4f} | {np.mean([b[s]['nll'] for s in common]):.3f} → "
              f"{np.mean([a[s]['nll'] for s in common]):.3f} ({dn.mean():+.3f} ± {se:.3f}, {(dn < 0).sum()}) | "
              f"{tb} → {ta} | {np.median(nus) if nus else float('nan'):.3g} | "
              f"{seconds[0]:.3g} → {seconds[1]:.3g} |")
    print(f"\ncounted sets {counted}: calibrated {verdicts[0]} → {verdicts[1]}; mean NLL lower on {lower}")


if __name__ == "__main__":
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    main(*sys.argv[1:])

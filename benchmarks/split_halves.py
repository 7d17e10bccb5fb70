"""Whether a calibration verdict holds on each half of the splits: per set and row, every split's test mean z², then
splits 0–4, 5–9 and 0–9 pooled as the calibration suite pools them (95 % coverage / mean z², the verdict, mean NLL and
RMSE on standardised targets).

    python benchmarks/split_halves.py RESULTS.jsonl 'ROW|ROW…' SET,SET…

Used where a row's records were extended from five splits to ten (docs/methods/dak.md, fmgp.md and dbk.md, "Ten
splits of the seven sets").
"""

import json
import sys

from neuralgp.bench.calibration import calibrated, pooled

HALVES = ((0, 4), (5, 9), (0, 9))


def main(path, rows, sets):
    records = [json.loads(line) for line in open(path)]
    for dataset in sets:
        for row in rows:
            fits = sorted((r for r in records if r["dataset"] == dataset and r["model"] == row), key=lambda r: r["seed"])
            print(dataset, row, "per split z2", [round(r["mean_z2"], 2) for r in fits])
            for lo, hi in HALVES:
                p = pooled([r for r in fits if lo <= r["seed"] <= hi])
                if p is None:
                    print(f"  splits {lo}-{hi}: none")
                    continue
                print(f"  splits {lo}-{hi}: {p['coverage_95']:.3f} / {p['mean_z2']:.2f} "
                      f"{'calibrated' if calibrated(p) else 'not calibrated'}, NLL {p['nll']:.3f}, "
                      f"RMSE {p['rmse']:.4f} ({p['splits']} splits)")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2].split("|"), sys.argv[3].split(","))

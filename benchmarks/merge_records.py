"""Merge the records of ``benchmarks/bench_parallel.sh`` runs into a suite's results, replacing any record of the same
(model, dataset, split) (where two runs hold one, the later RUN_DIR's wins); then ``neuralgp bench SUITE
--report-only --out DIR`` rewrites the table.

    python benchmarks/merge_records.py DEST/results.jsonl RUN_DIR [RUN_DIR ...]
"""

import glob
import json
import os
import sys


def key(line):
    r = json.loads(line)
    return r["model"], r["dataset"], r["split"]


def main(dest, *run_dirs):
    latest = {key(line): line if line.endswith("\n") else line + "\n" for d in run_dirs  # a later RUN_DIR wins
              for f in sorted(glob.glob(f"{d}/jobs/*/results.jsonl")) for line in open(f) if line.strip()}
    new, replaced = list(latest.values()), latest.keys()
    old = [line for line in open(dest) if line.strip()]
    keep = [line for line in old if key(line) not in replaced]
    with open(f"{dest}.tmp", "w") as fh:  # all or nothing: an interrupted merge leaves DEST as it was
        fh.writelines(keep + new)
    os.replace(f"{dest}.tmp", dest)
    print(f"{len(old)} old records, {len(old) - len(keep)} replaced, {len(new)} new")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(*sys.argv[1:])

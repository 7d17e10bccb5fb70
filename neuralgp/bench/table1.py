"""Aggregate `neuralgp fit --json` records into the DBK paper's Table 1 layout, paper values beside ours.

    python -m neuralgp.bench.table1 benchmarks/results/dbk-table1-exact benchmarks/results/dbk-table1-svi
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

# DBK paper, Table 1: (MAE, RMSE, NLL) mean and std over 5 seeds, V100 GPU
PAPER = {
    ("pol", "dbk"): ((0.0249, 0.0003), (0.0583, 0.0018), (-1.5117, 0.0323)),
    ("pol", "dbk-c"): ((0.0501, 0.0014), (0.0900, 0.0020), (-0.9720, 0.0363)),
    ("pol", "dbk-r"): ((0.0325, 0.0014), (0.0615, 0.0040), (-1.4297, 0.0521)),
    ("pol", "dbk-cr"): ((0.0303, 0.0014), (0.0599, 0.0017), (-1.3825, 0.0291)),
    ("pol", "svdbk"): ((0.0806, 0.0175), (0.1263, 0.0201), (-0.5228, 0.1011)),
    ("protein", "dbk"): ((0.4592, 0.0141), (0.6525, 0.0104), (2.2843, 0.0616)),
    ("protein", "dbk-c"): ((0.4925, 0.0034), (0.7279, 0.0031), (4.3396, 0.1898)),
    ("protein", "dbk-r"): ((0.4115, 0.0069), (0.5769, 0.0055), (0.9324, 0.0151)),
    ("protein", "dbk-cr"): ((0.4239, 0.0047), (0.6077, 0.0041), (1.5096, 0.0614)),
    ("protein", "svdbk"): ((0.3730, 0.0068), (0.5519, 0.0057), (0.8425, 0.0115)),
}
ROWS = [  # (record name, label, paper row it is compared with)
    ("dbk", "DBK (ours: constant-norm features, default)", "dbk"),
    ("dbk-paper", "DBK (paper's trace + diagonal correction)", "dbk"),
    ("dbk-c", "DBK-c", "dbk-c"),
    ("dbk-r", "DBK-r", "dbk-r"),
    ("dbk-cr", "DBK-cr", "dbk-cr"),
    ("svdbk", "SVDBK (ours: constant-norm features, default)", "svdbk"),
]


def _cell(values) -> str:
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{statistics.mean(values):.4f} ({statistics.stdev(values):.4f})"


def _paper(entry) -> str:
    return "–" if entry is None else f"{entry[0]:.4f} ({entry[1]:.4f})"


def load_records(folders) -> dict:
    """{(dataset, model name): [record, …]} from files named DATASET-NAME-SEED.json."""
    records = defaultdict(list)
    for folder in folders:
        for path in sorted(Path(folder).glob("*.json")):
            dataset, rest = path.stem.split("-", 1)
            name = rest.rsplit("-", 1)[0]
            records[(dataset, name)].append(json.loads(path.read_text()))
    return records


def table(records) -> str:
    lines = []
    for dataset in sorted({d for d, _ in records}):
        lines += [f"\n**{dataset}**\n",
                  "| model | seeds | MAE | RMSE | NLL | 95% cov. | train s | iterations | paper MAE | paper RMSE | paper NLL |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for name, label, paper_row in ROWS:
            runs = records.get((dataset, name))
            if not runs:
                continue
            paper = PAPER.get((dataset, paper_row), (None, None, None))
            budget = " (time-capped)" if any(r.get("out_of_time") for r in runs) else ""
            lines.append(
                f"| {label} | {len(runs)} | {_cell([r['mae'] for r in runs])} | {_cell([r['rmse'] for r in runs])} | "
                f"{_cell([r['nll'] for r in runs])} | {_cell([r['coverage_95'] for r in runs])} | "
                f"{statistics.mean(r['train_seconds'] for r in runs):.0f} | "
                f"{statistics.mean(r['iterations'] for r in runs):.0f}{budget} | "
                + " | ".join(_paper(p) for p in paper) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(load_records(sys.argv[1:])))

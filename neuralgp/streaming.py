"""Predictions for rows streamed from a row source to a file, a chunk at a time: memory flat in the number of rows.

Regressors write (mean, std) per row, classifiers the probability of each class (and, in CSV, the label). The
file appears only once every row is written (a temporary file renamed): an error half-way leaves nothing behind.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from neuralgp.datasets.rows import RowSource
from neuralgp.errors import InputError
from neuralgp.io import write_atomic

FORMATS = (".npy", ".csv")


def _columns(model) -> list[str]:
    if hasattr(model, "predict_proba"):
        return [f"p_{c}" for c in model.classes_]
    return ["mean", "std"]


def _predict_chunk(model, X) -> np.ndarray:
    if hasattr(model, "predict_proba"):
        return model.predict_proba(X)
    return np.column_stack(model.predict(X, return_std=True))


def predict_rows(model, rows: RowSource, out, chunk_rows: int | None = None) -> Path:
    """Predict every row of ``rows`` (read ``chunk_rows`` at a time; all rows, in one process) into ``out``:
    ``.npy`` — a float64 array (n, 2) of mean and std for regressors, (n, C) class probabilities for classifiers;
    ``.csv`` — the same with a header (and, for classifiers, a ``label`` column first). Returns the path."""
    out = Path(out)
    if out.suffix not in FORMATS:
        raise InputError(f"output {out} must end in {' or '.join(FORMATS)}")
    if not out.parent.is_dir():
        raise InputError(f"folder {out.parent} for the predictions does not exist; create it first")
    if not isinstance(rows, RowSource):
        raise InputError("rows must be a row source: neuralgp.datasets.rows.NpyRows, CsvRows or ArrayRows")
    model._check_fitted()
    columns = _columns(model)
    classifier = hasattr(model, "predict_proba")

    def write(tmp):
        with (open(tmp, "wb") if out.suffix == ".npy" else open(tmp, "w", newline="")) as fh:
            if out.suffix == ".npy":
                np.lib.format.write_array_header_2_0(
                    fh, {"descr": "<f8", "fortran_order": False, "shape": (rows.n_rows, len(columns))})
            else:
                writer = csv.writer(fh)
                writer.writerow((["label"] if classifier else []) + columns)
            written = 0
            for X, _ in rows.chunks(chunk_rows, shard=False):
                block = _predict_chunk(model, X).astype("<f8")
                if out.suffix == ".npy":
                    fh.write(block.tobytes())
                elif classifier:
                    writer.writerows([label, *p] for label, p in zip(model.classes_[block.argmax(1)].tolist(),
                                                                     block.tolist()))
                else:
                    writer.writerows(block.tolist())
                written += len(block)
        if written != rows.n_rows:
            raise InputError(f"the source gave {written} rows, not the {rows.n_rows} it announced")
    return write_atomic(out, write)

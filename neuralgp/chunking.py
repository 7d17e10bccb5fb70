"""Row-chunk sizes, named once, and the one helper that maps a function over row chunks."""

from __future__ import annotations

import torch

NO_GRAD_ROWS = 65536        # rows through a network without a graph at a time: features, statistics, validation
PREDICT_ROWS = 8192         # rows per call of an estimator's scaled predictor
SOFTMAX_ROWS = 2048         # rows per Monte Carlo softmax (samples × rows × classes)
EXACT_TRAIN_ROWS = 262144   # DBK's default chunk_size: above it the exact gradient is accumulated in chunks
NEIGHBOUR_ROWS = 128        # GPnn test points per batched k × k Cholesky


def row_slices(n: int, rows: int | None = None):
    """Consecutive slices of ``rows`` (default ``NO_GRAD_ROWS``, read at call time) covering range(n)."""
    rows = rows or NO_GRAD_ROWS
    return [slice(i, i + rows) for i in range(0, n, rows)]


def map_rows(fn, X, rows: int | None = None) -> torch.Tensor:
    """torch.cat of fn over consecutive row chunks of X."""
    return torch.cat([fn(X[s]) for s in row_slices(len(X), rows)])

"""Nearest training rows for the nearest-neighbour models (KRRNN, GPnn): scikit-learn's NearestNeighbors, with the
leave-one-out neighbourhoods both need."""

from __future__ import annotations

import numpy as np


def nearest_rows(index, X, k: int, own_rows: np.ndarray | None = None) -> np.ndarray:
    """(m, k) indices of the ``k`` nearest training rows of each query in ``X`` (``index``: a fitted
    NearestNeighbors). ``own_rows``: each query's own training row, left out of its neighbourhood (leave-one-out)
    — by index, not as the first neighbour, since with copies of an input at distance 0 a copy may come first."""
    if own_rows is None:
        return index.kneighbors(X, n_neighbors=k, return_distance=False)
    idx = index.kneighbors(X, n_neighbors=k + 1, return_distance=False)
    own = idx == np.asarray(own_rows)[:, None]
    return np.take_along_axis(idx, np.argsort(own, axis=1, kind="stable"), axis=1)[:, :k]

"""Farthest-point sampling (the two-stage paper's Algorithm 4): a quasi-uniform subsample for the kernel search."""

from __future__ import annotations

import numpy as np


def farthest_point_sampling(X, k: int, start: str = "centroid", seed: int = 0) -> np.ndarray:
    """Indices of k rows of X, each the farthest (Euclidean) from those chosen before it.

    ``start="centroid"`` begins at the row nearest the mean (the paper's, deterministic); ``"random"`` at a row drawn
    with ``seed`` (what repeated subsamples need). O(n·k·d) time and O(n) memory beyond X: one running distance per
    row, updated with the last point added (the paper's "dist(x_j, x_i)" is an index typo for that point).
    """
    X = np.asarray(X, dtype=np.float64)
    n = len(X)
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, {n}] (the number of rows), got {k}")
    if start == "centroid":
        first = int(np.argmin(((X - X.mean(0)) ** 2).sum(1)))
    elif start == "random":
        first = int(np.random.default_rng(seed).integers(n))
    else:
        raise ValueError(f"start must be 'centroid' or 'random', got {start!r}")
    chosen = np.empty(k, dtype=np.int64)
    chosen[0] = first
    dist = np.full(n, np.inf)
    for i in range(1, k):
        dist = np.minimum(dist, ((X - X[chosen[i - 1]]) ** 2).sum(1))
        chosen[i] = int(np.argmax(dist))
    return chosen

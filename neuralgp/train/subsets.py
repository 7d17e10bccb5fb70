"""Random disjoint training subsets for decoupled hyper-parameter estimation (FM-GP, GPnn)."""

from __future__ import annotations

import numpy as np


def training_subsets(n: int, n_subsets: int, subset_size: int, seed) -> list[np.ndarray]:
    """``n_subsets`` random disjoint index sets of size min(subset_size, n // n_subsets) (at least 1); ``seed`` is
    anything ``numpy.random.default_rng`` takes."""
    k = max(1, min(int(n_subsets), n))
    size = max(1, min(int(subset_size), n // k))
    perm = np.random.default_rng(seed).permutation(n)
    return [perm[i * size:(i + 1) * size] for i in range(k)]

"""Split protocols: ``random`` 70/10/20, ``mask:K`` (fixed 90/10 test masks), ``gal:K`` (index files),
``holdout:T:V`` (T test and V validation rows, the rest train: FM-GP's 1000/1000 protocol), ``kfold:K`` (fold K
of 5-fold cross-validation, the DAK paper's KFold(5, shuffle=True, random_state=10))."""

from __future__ import annotations

import numpy as np

from neuralgp.errors import DataError

VAL_FRACTION_OF_TRAIN = 1 / 9  # mask/gal protocols: 10 % of all rows carved from the 90 % train part


def random_split(n: int, seed: int, labels: np.ndarray | None = None, fractions=(0.7, 0.1, 0.2)):
    """Seeded train/val/test indices (the DBK paper's 70/10/20); stratified when labels are given."""
    rng = np.random.default_rng(seed)
    if labels is None:
        perm = rng.permutation(n)
        n_tr, n_va = int(round(fractions[0] * n)), int(round(fractions[1] * n))
        return perm[:n_tr], perm[n_tr:n_tr + n_va], perm[n_tr + n_va:]
    parts = ([], [], [])
    for cls in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == cls))
        n_tr, n_va = int(round(fractions[0] * len(idx))), int(round(fractions[1] * len(idx)))
        for part, chunk in zip(parts, (idx[:n_tr], idx[n_tr:n_tr + n_va], idx[n_tr + n_va:])):
            part.append(chunk)
    return tuple(rng.permutation(np.concatenate(p)) for p in parts)


KFOLDS, KFOLD_SHUFFLE_SEED = 5, 10


def kfold_test(n: int, k: int) -> np.ndarray:
    """Test indices of fold k of scikit-learn's KFold(5, shuffle=True, random_state=10): the same partition for
    every k, so the five folds' test parts cover every row once."""
    from sklearn.model_selection import KFold
    if not 0 <= k < KFOLDS:
        raise DataError(f"kfold has folds 0..{KFOLDS - 1}, not {k}")
    return list(KFold(KFOLDS, shuffle=True, random_state=KFOLD_SHUFFLE_SEED).split(np.arange(n)))[k][1]


def carve_validation(train_idx: np.ndarray, seed: int):
    """Split fixed training indices into train and validation (seeded)."""
    perm = np.random.default_rng(seed).permutation(train_idx)
    n_va = max(1, int(round(VAL_FRACTION_OF_TRAIN * len(perm))))
    return perm[n_va:], perm[:n_va]


def holdout_split(n: int, seed: int, n_test, n_val):
    """Seeded train/val/test indices with ``n_test`` and ``n_val`` rows (counts, or fractions below 1)."""
    sizes = [int(round(v * n)) if v < 1 else int(v) for v in (n_test, n_val)]
    if sum(sizes) >= n:
        raise DataError(f"holdout:{n_test:g}:{n_val:g} leaves no training rows of {n}; use smaller parts "
                        f"or fractions, e.g. holdout:0.2:0.1")
    perm = np.random.default_rng(seed).permutation(n)
    return perm[sizes[0] + sizes[1]:], perm[sizes[0]:sizes[0] + sizes[1]], perm[:sizes[0]]


ALLOWED_NAMES = {"random": "random", "holdout": "holdout:T:V", "kfold": "kfold:K (K = 0..4)"}


def parse_split(split: str, allowed: tuple[str, ...]):
    """'random' → ('random', None); 'mask:3' → ('mask', 3); 'holdout:1000:1000' → ('holdout', (1000., 1000.)).

    Unknown protocols name the allowed ones."""
    kind, _, k = split.partition(":")
    if kind not in allowed:
        raise DataError(f"split {split!r} is not available for this data set; use one of "
                        + ", ".join(ALLOWED_NAMES.get(a, f"{a}:K") for a in allowed))
    if kind == "random":
        return kind, None
    if kind == "holdout":
        try:
            n_test, n_val = (float(v) for v in k.split(":"))
            if n_test <= 0 or n_val <= 0:
                raise ValueError
        except ValueError:
            raise DataError(f"split {split!r} needs two positive sizes, e.g. holdout:1000:1000 "
                            f"(counts) or holdout:0.2:0.1 (fractions)") from None
        return kind, (n_test, n_val)
    try:
        return kind, int(k)
    except ValueError:
        raise DataError(f"split {split!r} needs an integer index, e.g. {kind}:0") from None

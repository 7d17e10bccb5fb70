"""Data sets: ``load(name, split=…, seed=…, root=None)`` → a ``Dataset`` of raw train/val/test arrays.

Names: ``uci/<set>``, ``gal/<set>``, ``uci_classification/<set>``, ``digits``, ``synthetic/step1d``
or a path to a CSV file. Scaling is not applied here: estimators fit their scalers on the
training part and store them, so predictions come back in the user's units.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from neuralgp.datasets import download, readers
from neuralgp.datasets.scaling import Scaler
from neuralgp.datasets.splits import carve_validation, holdout_split, kfold_test, parse_split, random_split
from neuralgp.datasets.synthetic import step1d_function, step1d_sample
from neuralgp.errors import DataError


@dataclass
class Dataset:
    name: str
    split: str
    seed: int
    task: str  # "regression" or "classification"
    X_train: np.ndarray
    y_train: np.ndarray
    X_val: np.ndarray
    y_val: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    classes: list = field(default_factory=list)

    @property
    def n_features(self) -> int:
        return self.X_train.shape[1]

    def __repr__(self):
        return (f"Dataset({self.name!r}, split={self.split!r}, seed={self.seed}, train={len(self.y_train)}, "
                f"val={len(self.y_val)}, test={len(self.y_test)}, d={self.n_features})")


def _index(name, split, seed, task, X, y, tr, va, te, classes=()):
    return Dataset(name, split, seed, task, X[tr], y[tr], X[va], y[va], X[te], y[te], list(classes))


def load(name: str, split: str | None = None, seed: int = 0, root=None, n: int | None = None,
         target=-1) -> Dataset:
    """Load a data set and split it (see the module docstring for names and protocols).

    ``n`` sets the training size of ``synthetic/step1d`` (default 1000; 10 % more for validation and
    1000 test points); ``target`` picks the target column of a CSV file by name or index.
    """
    family, _, set_name = name.partition("/")
    if family == "synthetic":
        if set_name != "step1d":
            raise DataError(f"unknown synthetic set {name!r}; available: synthetic/step1d")
        n = 1000 if n is None else int(n)
        if n < 2:
            raise DataError(f"synthetic/step1d needs n >= 2, got {n}")
        rng = np.random.default_rng(seed)
        n_val = max(n // 10, 2)
        X, y = step1d_sample(n + n_val + 1000, rng)
        idx = np.arange(len(y))
        return _index(name, "random", seed, "regression", X, y, idx[:n], idx[n:n + n_val], idx[n + n_val:])
    if name == "digits":
        from sklearn.datasets import load_digits
        X, y = load_digits(return_X_y=True)
        return _split_classification(name, split, seed, X.astype(np.float64), y, list(range(10)))
    if family in ("uci", "gal", "uci_classification"):
        if not set_name:
            raise DataError(f"name the set: {family}/<set>; `neuralgp datasets` lists them")
        root = readers.data_root(root)
        if family == "uci":
            X, y, masks = readers.read_uci(root, set_name)
            kind, k = parse_split(split or "random", ("random", "mask", "holdout", "kfold"))
            if kind == "random":
                return _index(name, "random", seed, "regression", X, y, *random_split(len(y), seed))
            if kind == "holdout":
                return _index(name, split, seed, "regression", X, y, *holdout_split(len(y), seed, *k))
            if kind == "kfold":
                test = kfold_test(len(y), k)
                tr, va = carve_validation(np.setdiff1d(np.arange(len(y)), test), seed)
                return _index(name, f"kfold:{k}", seed, "regression", X, y, tr, va, test)
            if not 0 <= k < masks.shape[1]:
                raise DataError(f"{name} has masks 0..{masks.shape[1] - 1}, not {k}")
            tr, va = carve_validation(np.flatnonzero(~masks[:, k]), seed)
            return _index(name, f"mask:{k}", seed, "regression", X, y, tr, va, np.flatnonzero(masks[:, k]))
        if family == "gal":
            kind, k = parse_split(split or "gal:0", ("random", "gal"))
            X, y, train, test = readers.read_gal(root, set_name, k)
            if kind == "random":
                return _index(name, "random", seed, "regression", X, y, *random_split(len(y), seed))
            tr, va = carve_validation(train, seed)
            return _index(name, f"gal:{k}", seed, "regression", X, y, tr, va, test)
        X, y, classes = readers.read_uci_classification(root, set_name)
        return _split_classification(name, split, seed, X, y, [str(c) for c in classes])
    if Path(name).suffix in (".csv", ".gz") or Path(name).is_file():
        X, y, _ = readers.read_csv(name, target=target)
        parse_split(split or "random", ("random",))
        return _index(str(name), "random", seed, "regression", X, y, *random_split(len(y), seed))
    raise DataError(f"unknown data set {name!r}; use uci/<set>, gal/<set>, uci_classification/<set>, "
                    f"digits, synthetic/step1d or a path to a CSV file (`neuralgp datasets` lists them)")


def _split_classification(name, split, seed, X, y, classes):
    """``random`` (stratified 70/10/20) or ``holdout:T:V`` for a classification set."""
    kind, k = parse_split(split or "random", ("random", "holdout"))
    parts = random_split(len(y), seed, labels=y) if kind == "random" else holdout_split(len(y), seed, *k)
    return _index(name, split or "random", seed, "classification", X, y, *parts, classes=classes)


BUILT_IN = {"synthetic/step1d": (-1, 1), "digits": (1797, 64)}  # (n, d); n = -1: any size


def available(root=None) -> list[tuple[str, int, int]]:
    """(name, n, d) of every data set that can be loaded here (built in, or present in the data root)."""
    return [(name, *nd) for name, nd in BUILT_IN.items()] + readers.describe(readers.data_root(root))


def catalogue(root=None) -> list[tuple[str, int, int, bool]]:
    """(name, n, d, present) of every known data set (downloadable or built in) and any other set in the root."""
    here = {name: (n, d) for name, n, d in available(root)}
    known = {**BUILT_IN, **download.known_sets()}
    return [(name, *nd, name in here) for name, nd in {**known, **here}.items()]


__all__ = ["Dataset", "load", "available", "catalogue", "Scaler", "step1d_function"]

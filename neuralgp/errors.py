"""Errors that name the problem and the fix, and the input checks that raise them."""

from __future__ import annotations

import numpy as np


class NeuralGPError(ValueError):
    """Base class: a problem with the user's input, data or files (never a bug in neuralgp)."""


class InputError(NeuralGPError):
    """Bad arrays given to fit / predict."""


class DataError(NeuralGPError):
    """A data root, data set or CSV file that cannot be read."""


class ModelFileError(NeuralGPError):
    """A missing, corrupt or foreign model file."""


class NotFittedError(NeuralGPError, AttributeError):
    """A model used before ``fit``."""


def _as_float_array(a, name: str) -> np.ndarray:
    try:
        arr = np.asarray(a, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name} has non-numeric values ({exc}); encode categorical columns as numbers "
                         f"or drop them before fitting") from None
    if not np.all(np.isfinite(arr)):
        bad = int(np.size(arr) - np.isfinite(arr).sum())
        raise InputError(f"{name} contains {bad} NaN or infinite value(s); remove or impute them first")
    return arr


def check_X(X, n_features: int | None = None, name: str = "X") -> np.ndarray:
    """A finite float64 array of shape (n, d); 1-D input is refused with the reshape to use."""
    arr = _as_float_array(X, name)
    if arr.ndim == 1:
        raise InputError(f"{name} must be 2-D (n_samples, n_features), got shape {arr.shape}; "
                         f"use {name}.reshape(-1, 1) for a single feature")
    if arr.ndim != 2:
        raise InputError(f"{name} must be 2-D (n_samples, n_features), got shape {arr.shape}")
    if arr.shape[0] == 0:
        raise InputError(f"{name} has no rows")
    if n_features is not None and arr.shape[1] != n_features:
        raise InputError(f"{name} has {arr.shape[1]} features but the model was fitted with {n_features}")
    return arr


def _target_column(X: np.ndarray, y: np.ndarray, x_name: str, y_name: str) -> np.ndarray:
    """y as a 1-D array (an (n, 1) column is flattened) with one entry per row of X."""
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise InputError(f"{y_name} must be 1-D (n_samples,), got shape {y.shape}")
    if len(y) != len(X):
        raise InputError(f"{x_name} has {len(X)} rows but {y_name} has {len(y)}; they must match")
    return y


def check_X_y(X, y, min_rows: int = 2, x_name: str = "X", y_name: str = "y"):
    """Validated (X, y) for fitting: finite, 2-D X, 1-D y of the same length, y not constant."""
    X = check_X(X, name=x_name)
    y = _target_column(X, _as_float_array(y, y_name), x_name, y_name)
    if len(y) < min_rows:
        raise InputError(f"need at least {min_rows} rows to fit, got {len(y)}")
    if np.ptp(y) == 0:
        raise InputError(f"{y_name} is constant ({y[0]!r}); a GP needs varying targets")
    return X, y


def check_labels(X, y, x_name: str = "X", y_name: str = "y", min_classes: int = 2, n_features: int | None = None):
    """Validated (X, labels) for a classifier: integer class labels (any values), at least ``min_classes``."""
    X = check_X(X, n_features=n_features, name=x_name)
    y = _target_column(X, np.asarray(y), x_name, y_name)
    if y.dtype.kind not in "iub":
        as_float = _as_float_array(y, y_name) if y.dtype.kind == "f" else None
        if as_float is None or np.any(as_float != np.round(as_float)):
            raise InputError(f"{y_name} must hold integer class labels, got dtype {y.dtype} "
                             f"(e.g. {y[:3].tolist()}); encode classes as 0..C-1, e.g. with "
                             f"sklearn.preprocessing.LabelEncoder")
        y = as_float.astype(np.int64)
    if len(np.unique(y)) < min_classes:
        raise InputError(f"{y_name} has a single class ({y[0]!r}); a classifier needs at least two")
    return X, y.astype(np.int64)

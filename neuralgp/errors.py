"""Errors that name the problem and the fix, and the input checks that raise them.

The checks follow scikit-learn's conventions (its estimator checks test them): errors are ``ValueError``
subclasses (``TypeError`` too for values that are not numbers), a column-vector y warns with
``DataConversionWarning``, ``NotFittedError`` is scikit-learn's, sparse and complex input are refused.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse
from sklearn.exceptions import DataConversionWarning
from sklearn.exceptions import NotFittedError as _SklearnNotFittedError
from sklearn.utils.multiclass import check_classification_targets


class NeuralGPError(ValueError):
    """Base class: a problem with the user's input, data or files (never a bug in neuralgp)."""


class InputError(NeuralGPError):
    """Bad arrays given to fit / predict."""


class InputTypeError(InputError, TypeError):
    """Input holding objects that are not numbers (a dict, None, …)."""


class ParameterError(NeuralGPError):
    """A hyper-parameter outside what the estimator accepts (checked when ``fit`` starts)."""


class DataError(NeuralGPError):
    """A data root, data set or CSV file that cannot be read or fetched."""


class ModelFileError(NeuralGPError):
    """A missing, corrupt or foreign model file."""


class NotFittedError(NeuralGPError, _SklearnNotFittedError):
    """A model used before ``fit`` (a subclass of scikit-learn's ``NotFittedError``)."""


def _as_array(a, name: str) -> np.ndarray:
    """``a`` as a NumPy array; None, sparse matrices and complex values are refused."""
    if a is None:
        raise InputError(f"{name} is None; pass an array")
    if scipy.sparse.issparse(a):
        raise InputError(f"{name} is a sparse matrix, and sparse input is not supported: pass {name}.toarray()")
    try:
        arr = np.asarray(a)
    except ValueError as exc:  # ragged nested lists
        raise InputError(f"{name} cannot be read as an array ({exc}); give rows of equal length") from None
    if np.iscomplexobj(arr):
        raise InputError(f"Complex data not supported: {name} has complex values; pass the real and imaginary "
                         f"parts as separate columns")
    return arr


def _as_float_array(a, name: str) -> np.ndarray:
    arr = _as_array(a, name)
    try:
        arr = np.asarray(arr, dtype=np.float64)  # no copy of float64 input
    except TypeError as exc:
        raise InputTypeError(f"{name} holds values that are not numbers ({exc}); encode categorical columns "
                             f"as numbers or drop them before fitting") from None
    except ValueError as exc:
        raise InputError(f"{name} has non-numeric values ({exc}); encode categorical columns as numbers "
                         f"or drop them before fitting") from None
    if not np.all(np.isfinite(arr)):
        bad = int(np.size(arr) - np.isfinite(arr).sum())
        raise InputError(f"{name} contains {bad} NaN or infinite value(s); remove or impute them first")
    return arr


def check_X(X, n_features: int | None = None, name: str = "X", owner: str = "the model") -> np.ndarray:
    """A finite float64 array of shape (n, d), n, d ≥ 1; 1-D input is refused with the reshape to use.
    With ``n_features`` (prediction) the width must be the fitted one; ``owner`` names the estimator."""
    arr = _as_float_array(X, name)
    if arr.ndim == 1:
        raise InputError(f"{name} must be 2-D (n_samples, n_features), got shape {arr.shape}; Reshape your "
                         f"data: {name}.reshape(-1, 1) for a single feature, {name}.reshape(1, -1) for one sample")
    if arr.ndim != 2:
        raise InputError(f"{name} must be 2-D (n_samples, n_features), got shape {arr.shape}")
    if arr.shape[0] == 0:
        raise InputError(f"{name} has no rows: 0 sample(s) (shape={arr.shape}) while a minimum of 1 is required")
    if arr.shape[1] == 0:
        raise InputError(f"{name} has 0 feature(s) (shape={arr.shape}) while a minimum of 1 is required.")
    if n_features is not None and arr.shape[1] != n_features:
        raise InputError(f"{name} has {arr.shape[1]} features, but {owner} is expecting {n_features} features "
                         f"as input (the number it was fitted with)")
    return arr


def _target_column(X: np.ndarray, y: np.ndarray, x_name: str, y_name: str) -> np.ndarray:
    """y as a 1-D array with one entry per row of X; an (n, 1) column is flattened with scikit-learn's warning."""
    if y.ndim == 2 and y.shape[1] == 1:
        warnings.warn(f"A column-vector {y_name} was passed when a 1d array was expected. Please change the shape "
                      f"of {y_name} to (n_samples,), for example using ravel().", DataConversionWarning, stacklevel=4)
        y = y[:, 0]
    if y.ndim != 1:
        raise InputError(f"{y_name} must be 1-D (n_samples,), got shape {y.shape}; neuralgp models have one output")
    if len(y) != len(X):
        raise InputError(f"{x_name} has {len(X)} rows but {y_name} has {len(y)}; they must match")
    return y


def _require_y(y, y_name: str, owner: str):
    if y is None:
        raise InputError(f"{owner} requires y to be passed, but the target {y_name} is None")


def check_X_y(X, y, min_rows: int = 2, x_name: str = "X", y_name: str = "y", owner: str = "the model",
              varying: bool = True):
    """Validated (X, y) for fitting: finite, 2-D X, 1-D y of the same length, at least ``min_rows``, y not constant
    (unless ``varying`` is False: a validation or calibration part may hold one value, e.g. a few rows of
    count data)."""
    X = check_X(X, name=x_name)
    _require_y(y, y_name, owner)
    y = _target_column(X, _as_float_array(y, y_name), x_name, y_name)
    if len(y) < min_rows:
        raise InputError(f"need at least {min_rows} samples to fit, got {len(y)} sample"
                         + ("s" if len(y) != 1 else ""))
    if varying and np.ptp(y) == 0:
        raise InputError(f"{y_name} is constant ({y[0]!r}); a GP needs varying targets")
    return X, y


def check_labels(X, y, x_name: str = "X", y_name: str = "y", min_classes: int = 2, n_features: int | None = None,
                 owner: str = "the model"):
    """Validated (X, labels) for a classifier: class labels of any kind (ints, strings, …), at least
    ``min_classes`` of them; a continuous target is refused."""
    X = check_X(X, n_features=n_features, name=x_name, owner=owner)
    _require_y(y, y_name, owner)
    y = _target_column(X, _as_array(y, y_name), x_name, y_name)
    try:
        check_classification_targets(y)
    except ValueError as exc:
        raise InputError(f"{y_name}: {exc}") from None
    n_classes = len(np.unique(y))
    if n_classes < min_classes:
        raise InputError(f"{y_name} has 1 class ({y[0]!r}); a classifier needs at least {min_classes} classes")
    return X, y


class ResourceLimitError(NeuralGPError):
    """A model that would not fit in its memory budget (``max_memory_gb``); benchmarks record it like a paper's '−'."""


class CheckpointError(NeuralGPError):
    """A training checkpoint that cannot be resumed: unreadable, or written by another fit."""

"""Predictive metrics. Regression metrics take the predictive mean and std of y (noise included)."""

from __future__ import annotations

import numpy as np
from scipy.special import ndtr, ndtri

LOG_2PI = np.log(2 * np.pi)


def _regression_inputs(y, mean, std):
    y, mean, std = (np.asarray(a, dtype=np.float64).ravel() for a in (y, mean, std))
    if not (len(y) == len(mean) == len(std)):
        raise ValueError(f"y, mean and std must have equal lengths, got {len(y)}, {len(mean)}, {len(std)}")
    if np.any(std <= 0):
        raise ValueError("predictive std must be positive")
    return y, mean, std


def mae(y, mean) -> float:
    return float(np.mean(np.abs(np.asarray(y) - np.asarray(mean))))


def rmse(y, mean) -> float:
    return float(np.sqrt(np.mean((np.asarray(y) - np.asarray(mean)) ** 2)))


def nll(y, mean, std) -> float:
    """Mean Gaussian negative log predictive density of y."""
    y, mean, std = _regression_inputs(y, mean, std)
    return float(np.mean(0.5 * LOG_2PI + np.log(std) + 0.5 * ((y - mean) / std) ** 2))


def crps(y, mean, std) -> float:
    """Mean CRPS of N(mean, std²) at y (closed form of Gneiting & Raftery 2007)."""
    y, mean, std = _regression_inputs(y, mean, std)
    z = (y - mean) / std
    pdf = np.exp(-0.5 * z ** 2) / np.sqrt(2 * np.pi)
    return float(np.mean(std * (z * (2 * ndtr(z) - 1) + 2 * pdf - 1 / np.sqrt(np.pi))))


def coverage(y, mean, std, level: float) -> float:
    """Fraction of y inside the central ``level`` interval mean ± z·std."""
    y, mean, std = _regression_inputs(y, mean, std)
    half = ndtri(0.5 + level / 2) * std
    return float(np.mean(np.abs(y - mean) <= half))


def mean_z2(y, mean, std) -> float:
    """Mean squared z-score ((y − mean)/std)²: 1 for calibrated Gaussian predictions."""
    y, mean, std = _regression_inputs(y, mean, std)
    return float(np.mean(((y - mean) / std) ** 2))


def regression_report(y, mean, std) -> dict:
    """All regression metrics in one dict (the keys the CLI and benchmarks print)."""
    return {"mae": mae(y, mean), "rmse": rmse(y, mean), "mse": rmse(y, mean) ** 2, "nll": nll(y, mean, std),
            "crps": crps(y, mean, std), "coverage_50": coverage(y, mean, std, 0.5),
            "coverage_90": coverage(y, mean, std, 0.9), "coverage_95": coverage(y, mean, std, 0.95),
            "mean_z2": mean_z2(y, mean, std)}


def _classification_inputs(y, proba):
    y = np.asarray(y).astype(np.int64).ravel()
    proba = np.asarray(proba, dtype=np.float64)
    if proba.ndim != 2 or len(proba) != len(y):
        raise ValueError(f"proba must have shape (n, n_classes) with n = {len(y)}, got {proba.shape}")
    if y.min() < 0 or y.max() >= proba.shape[1]:
        raise ValueError("labels must be integers in 0..n_classes-1")
    return y, proba


def accuracy(y, proba) -> float:
    y, proba = _classification_inputs(y, proba)
    return float(np.mean(proba.argmax(1) == y))


def classification_nll(y, proba, eps: float = 1e-12) -> float:
    """Mean negative log probability of the true class."""
    y, proba = _classification_inputs(y, proba)
    return float(-np.mean(np.log(np.clip(proba[np.arange(len(y)), y], eps, None))))


def ece(y, proba, n_bins: int = 15) -> float:
    """Expected calibration error of the top-class confidence over equal-width bins."""
    y, proba = _classification_inputs(y, proba)
    conf, pred = proba.max(1), proba.argmax(1)
    bins = np.minimum((conf * n_bins).astype(int), n_bins - 1)
    total = 0.0
    for b in range(n_bins):
        sel = bins == b
        if sel.any():
            total += sel.mean() * abs(np.mean(pred[sel] == y[sel]) - conf[sel].mean())
    return float(total)


def brier(y, proba) -> float:
    """Multi-class Brier score: mean over points of Σ_c (p_c − 1[y = c])²."""
    y, proba = _classification_inputs(y, proba)
    onehot = np.eye(proba.shape[1])[y]
    return float(np.mean(((proba - onehot) ** 2).sum(1)))


def classification_report(y, proba) -> dict:
    return {"accuracy": accuracy(y, proba), "nll": classification_nll(y, proba),
            "ece": ece(y, proba), "brier": brier(y, proba)}

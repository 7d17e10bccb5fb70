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


def qice(y, mean, std, n_bins: int = 10) -> float:
    """Quantile interval coverage error in percent (CARD; two-stage GPR paper): the PIT values Φ((y − mean)/std) fall
    into ``n_bins`` equal bins of [0, 1]; QICE = 100 · (1/M) Σ_m |r_m − 1/M| with r_m the fraction in bin m.
    0 for calibrated predictions; at most 100 · 2(M − 1)/M² (all points in one bin)."""
    y, mean, std = _regression_inputs(y, mean, std)
    pit = ndtr((y - mean) / std)
    counts = np.bincount(np.minimum((pit * n_bins).astype(int), n_bins - 1), minlength=n_bins)
    return float(100 * np.mean(np.abs(counts / len(y) - 1 / n_bins)))


def hc_lc_rmse(y, mean, std, q: float = 0.1) -> tuple[float, float]:
    """RMSE of the 100q % most confident test points (std ≤ its q-quantile) and of the 100q % least confident
    (std > its (1 − q)-quantile; two-stage GPR paper §6.2). Good uncertainty gives HC < LC. The actual group
    sizes are the divisors (at least one point each)."""
    y, mean, std = _regression_inputs(y, mean, std)
    order = np.argsort(std, kind="stable")
    k = max(1, int(round(q * len(y))))
    return rmse(y[order[:k]], mean[order[:k]]), rmse(y[order[-k:]], mean[order[-k:]])


def regression_report(y, mean, std) -> dict:
    """All regression metrics in one dict (the keys the CLI and benchmarks print)."""
    hc, lc = hc_lc_rmse(y, mean, std)
    return {"mae": mae(y, mean), "rmse": rmse(y, mean), "mse": rmse(y, mean) ** 2, "nll": nll(y, mean, std),
            "crps": crps(y, mean, std), "coverage_50": coverage(y, mean, std, 0.5),
            "coverage_90": coverage(y, mean, std, 0.9), "coverage_95": coverage(y, mean, std, 0.95),
            "mean_z2": mean_z2(y, mean, std), "qice": qice(y, mean, std), "hc_rmse": hc, "lc_rmse": lc}


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

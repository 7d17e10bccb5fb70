"""Predictive metrics. Regression metrics take the predictive mean and std of y (noise included) and, for a
Student-t predictive, its degrees of freedom ``df`` (> 2: the std is the t's own, √(df/(df − 2)) times its scale);
``df=None`` is the Gaussian."""

from __future__ import annotations

import numpy as np
from scipy.special import betaln, ndtr, ndtri, stdtr, stdtrit
from scipy.stats import t as student_t

LOG_2PI = np.log(2 * np.pi)


def _regression_inputs(y, mean, std):
    y, mean, std = (np.asarray(a, dtype=np.float64).ravel() for a in (y, mean, std))
    if not (len(y) == len(mean) == len(std)):
        raise ValueError(f"y, mean and std must have equal lengths, got {len(y)}, {len(mean)}, {len(std)}")
    if np.any(std <= 0):
        raise ValueError("predictive std must be positive")
    return y, mean, std


def _t_scale(std, df):
    """The scale of a Student-t with ``df`` degrees of freedom whose std is ``std``."""
    if not df > 2:
        raise ValueError(f"a Student-t predictive needs df > 2 (a finite std), got {df}")
    return std * np.sqrt((df - 2) / df)


def cdf(z, df=None):
    """The predictive CDF at standardised errors z = (y − mean)/std (unit variance; Gaussian for ``df=None``)."""
    z = np.asarray(z, dtype=np.float64)
    return ndtr(z) if df is None else stdtr(df, z / _t_scale(1.0, df))


def quantile(p, df=None):
    """The unit-variance predictive's p-quantile (the inverse of ``cdf``)."""
    p = np.asarray(p, dtype=np.float64)
    return ndtri(p) if df is None else stdtrit(df, p) * _t_scale(1.0, df)


def mae(y, mean) -> float:
    return float(np.mean(np.abs(np.asarray(y) - np.asarray(mean))))


def rmse(y, mean) -> float:
    return float(np.sqrt(np.mean((np.asarray(y) - np.asarray(mean)) ** 2)))


def nll(y, mean, std, df=None) -> float:
    """Mean negative log predictive density of y (Gaussian, or Student-t with ``df``)."""
    y, mean, std = _regression_inputs(y, mean, std)
    if df is None:
        return float(np.mean(0.5 * LOG_2PI + np.log(std) + 0.5 * ((y - mean) / std) ** 2))
    return float(-np.mean(student_t.logpdf(y, df, loc=mean, scale=_t_scale(std, df))))


def crps(y, mean, std, df=None) -> float:
    """Mean CRPS at y of N(mean, std²) (closed form of Gneiting & Raftery 2007) or of the Student-t with ``df``
    (closed form of Jordan, Krüger & Lerch 2019, scoringRules' crps_t)."""
    y, mean, std = _regression_inputs(y, mean, std)
    if df is None:
        z = (y - mean) / std
        pdf = np.exp(-0.5 * z ** 2) / np.sqrt(2 * np.pi)
        return float(np.mean(std * (z * (2 * ndtr(z) - 1) + 2 * pdf - 1 / np.sqrt(np.pi))))
    scale = _t_scale(std, df)
    u = (y - mean) / scale
    const = 2 * np.sqrt(df) * np.exp(betaln(0.5, df - 0.5) - 2 * betaln(0.5, df / 2)) / (df - 1)
    terms = u * (2 * stdtr(df, u) - 1) + 2 * student_t.pdf(u, df) * (df + u ** 2) / (df - 1) - const
    return float(np.mean(scale * terms))


def coverage(y, mean, std, level: float, df=None) -> float:
    """Fraction of y inside the central ``level`` interval mean ± q·std (q the predictive's quantile)."""
    y, mean, std = _regression_inputs(y, mean, std)
    half = quantile(0.5 + level / 2, df) * std
    return float(np.mean(np.abs(y - mean) <= half))


def mean_z2(y, mean, std) -> float:
    """Mean squared z-score ((y − mean)/std)²: 1 for calibrated Gaussian predictions."""
    y, mean, std = _regression_inputs(y, mean, std)
    return float(np.mean(((y - mean) / std) ** 2))


def qice(y, mean, std, n_bins: int = 10, df=None) -> float:
    """Quantile interval coverage error in percent (CARD; two-stage GPR paper): the PIT values F((y − mean)/std) fall
    into ``n_bins`` equal bins of [0, 1]; QICE = 100 · (1/M) Σ_m |r_m − 1/M| with r_m the fraction in bin m.
    0 for calibrated predictions; at most 100 · 2(M − 1)/M² (all points in one bin)."""
    y, mean, std = _regression_inputs(y, mean, std)
    pit = cdf((y - mean) / std, df)
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


def regression_report(y, mean, std, df=None) -> dict:
    """All regression metrics in one dict (the keys the CLI and benchmarks print); ``df``: a Student-t predictive."""
    hc, lc = hc_lc_rmse(y, mean, std)
    return {"mae": mae(y, mean), "rmse": rmse(y, mean), "mse": rmse(y, mean) ** 2, "nll": nll(y, mean, std, df),
            "crps": crps(y, mean, std, df), "coverage_50": coverage(y, mean, std, 0.5, df),
            "coverage_90": coverage(y, mean, std, 0.9, df), "coverage_95": coverage(y, mean, std, 0.95, df),
            "mean_z2": mean_z2(y, mean, std), "qice": qice(y, mean, std, df=df), "hc_rmse": hc, "lc_rmse": lc,
            "predictive_df": df}


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

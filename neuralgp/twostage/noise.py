"""Heteroscedastic noise for the two-stage variance model (beyond the paper, whose noise is one σ²): the noise
variance at x is σ² s(x), s(x) = exp(ρ g(x)) / mean over the training rows, g a kernel ridge regression of the
centred log squared honest residuals (each row's error from a mean model that did not see it) and
ρ ∈ [0, 1] the shape's strength (0: one σ²), which the estimator chooses by held-out NLL (``choose_strength``). The
classical smoother of squared residuals (Harvey 1976; Yu & Jones 2004) on the kernel ridge of ``ridge``: λ (up to
1e3 here), kernel and lengthscale by cross-validation, which shrinks g toward flat — not all the way on few rows
(on pure noise exp(g) spans 0.04–6.2 at 60 rows, 0.46–1.61 at 300: docs/methods/twostage.md).

log r² = log σ²(x) + log χ²₁ for Gaussian errors: the offset E[log χ²₁] and the centring are constants that
the normalisation removes.
"""

from __future__ import annotations

import numpy as np

from neuralgp.twostage.ridge import ALPHAS, fit_kernel_ridge, refit_kernel_ridge, ridge_from_state, ridge_state

LOG_FLOOR = 1e-2  # δ in log(r² + δ), on residuals of unit mean square: an exact fit at one row must not weigh −∞
SHAPE_ALPHAS = ALPHAS + (10.0, 100.0, 1000.0)  # log χ²₁ has variance π²/2 ≈ 4.9: λ up to 1e3 lets CV choose flat
STRENGTHS = (0.0, 0.25, 0.5, 0.75, 1.0)


def _targets(r) -> np.ndarray:
    t = np.log(np.asarray(r, dtype=np.float64) ** 2 + LOG_FLOOR)
    return t - t.mean()  # kernel ridge has no intercept: it shrinks toward 0, i.e. toward a flat s


def profile_nll(err, var) -> float:
    """Mean Gaussian NLL of errors ``err`` under variances α·``var`` at the best single scale α = mean z² (what the
    recalibration then fits), without the constant ½ log 2π + ½."""
    return float(np.mean(0.5 * np.log(var)) + 0.5 * np.log(max(np.mean(err ** 2 / var), np.finfo(float).tiny)))


class NoiseShape:
    """s(x) ≥ 0 of mean 1 over the training rows. ``n_neighbors`` = None: kernel ridge on all rows (O(n³), the
    exact pipeline); a number: KRRNN on that many neighbours, its hyper-parameters by CV on a subsample (the
    scalable pipeline's cost); ``device`` = where kernel ridge computes (``ridge.KernelRidgeCV``). ``strength_`` ρ:
    1 after ``fit``, set by ``choose_strength``."""

    def __init__(self, n_neighbors: int | None = None, seed: int = 0, alphas=SHAPE_ALPHAS, device="cpu"):
        self.n_neighbors = n_neighbors
        self.seed = seed
        self.alphas = alphas
        self.device = device

    def fit(self, X, r) -> "NoiseShape":
        self.model_ = fit_kernel_ridge(X, _targets(r), self.n_neighbors, self.seed, self.alphas, self.device)
        self._g_train = self.model_.predict(X)
        self.set_strength(1.0)
        return self

    def set_strength(self, strength: float) -> None:
        """ρ, and the normalisation to mean 1 over the training rows that goes with it (a fit-time step: a shape
        restored by ``from_state`` keeps the ρ it was saved with and no training rows)."""
        if not hasattr(self, "_g_train"):
            raise RuntimeError("set_strength() needs the training rows of a fitted NoiseShape; a loaded one keeps "
                               "the strength it was saved with — refit the model to choose another")
        self.strength_ = float(strength)
        self.norm_ = float(np.mean(np.exp(self.strength_ * self._g_train)))

    def __call__(self, X) -> np.ndarray:
        return np.exp(self.strength_ * self.model_.predict(X)) / self.norm_

    def held_out_log_shapes(self, X, folds) -> tuple[np.ndarray, list]:
        """g at each fold's held-out rows from this shape's hyper-parameters refitted on the other rows, and per
        fold (held-out rows, g at its training rows) for the normalisation. ``folds``: (train rows, held-out rows,
        honest residuals of the train rows from a mean model that never saw the held-out rows)."""
        g, norms = np.empty(len(X)), []
        for train, held, r in folds:
            model = refit_kernel_ridge(self.model_, X[train], _targets(r))
            g[held] = model.predict(X[held])
            norms.append((held, model.predict(X[train])))
        return g, norms

    def choose_strength(self, err, var_f, noise, g, norms, strengths=STRENGTHS) -> np.ndarray:
        """Set ρ to the strength whose held-out shapes give the errors ``err`` of the held-out rows the lowest
        ``profile_nll`` under var_f + noise · s; returns those rows' s at the chosen ρ (for the recalibration).
        Held out, not leave-one-out: a row's own large error pulls the mean model toward it and so enlarges its
        neighbours' leave-one-out residuals — the shape then "predicts" the error it was shown (gal/concrete:
        leave-one-out NLL chose ρ = 0.75–1 where the test NLL wanted 0–0.25)."""
        def shape_at(rho):
            s = np.empty(len(err))
            for held, g_train in norms:
                s[held] = np.exp(rho * g[held]) / np.mean(np.exp(rho * g_train))
            return s
        scores = {rho: profile_nll(err, var_f + noise * shape_at(rho)) for rho in strengths}
        self.strength_scores_ = scores
        self.set_strength(min(scores, key=scores.get))
        return shape_at(self.strength_)

    def state(self) -> dict:
        return {"model": ridge_state(self.model_), "norm": self.norm_, "n_neighbors": self.n_neighbors,
                "strength": self.strength_}

    @classmethod
    def from_state(cls, state: dict, device="cpu") -> "NoiseShape":
        shape = cls(state["n_neighbors"], device=device)
        shape.model_, shape.norm_ = ridge_from_state(state["model"], device), state["norm"]
        shape.strength_ = state.get("strength", 1.0)  # files from before the strength was chosen
        return shape

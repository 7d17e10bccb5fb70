"""Heteroscedastic noise for the two-stage variance model (beyond the paper, whose noise is one σ²): the noise
variance at x is σ² s(x), with log s a kernel ridge regression of the log squared honest residuals (each row's
error from a mean model that did not see it), centred, and s normalised to mean 1 over the training rows. The
classical smoother of squared residuals (Harvey 1976; Yu & Jones 2004) on the kernel ridge of ``ridge``: λ (up to
1e3 here), kernel and lengthscale by cross-validation, which shrinks log s toward flat — not all the way on few rows
(on pure noise s spans 0.04–6.2 at 60 rows, 0.46–1.61 at 300: docs/methods/twostage.md). The residuals must be
honest, copies of an input left out with it (``ridge.input_groups``): else a duplicated row teaches s ≈ 0 there.

log r² = log σ²(x) + log χ²₁ for Gaussian errors: the offset E[log χ²₁] and the centring are constants that
the normalisation removes.
"""

from __future__ import annotations

import numpy as np

from neuralgp.twostage.ridge import ALPHAS, fit_kernel_ridge, ridge_from_state, ridge_state

LOG_FLOOR = 1e-2  # δ in log(r² + δ), on residuals of unit mean square: an exact fit at one row must not weigh −∞
SHAPE_ALPHAS = ALPHAS + (10.0, 100.0, 1000.0)  # log χ²₁ has variance π²/2 ≈ 4.9: λ up to 1e3 lets CV choose flat


class NoiseShape:
    """s(x) ≥ 0 of mean 1 over the training rows. ``n_neighbors`` = None: kernel ridge on all rows (O(n³), the
    exact pipeline); a number: KRRNN on that many neighbours, its hyper-parameters by CV on a subsample (the
    scalable pipeline's cost)."""

    def __init__(self, n_neighbors: int | None = None, seed: int = 0, alphas=SHAPE_ALPHAS):
        self.n_neighbors = n_neighbors
        self.seed = seed
        self.alphas = alphas

    def fit(self, X, r) -> "NoiseShape":
        t = np.log(np.asarray(r, dtype=np.float64) ** 2 + LOG_FLOOR)
        t = t - t.mean()  # kernel ridge has no intercept: it shrinks toward 0, i.e. toward a flat s
        self.model_ = fit_kernel_ridge(X, t, self.n_neighbors, self.seed, self.alphas)
        self._loo = t - self.model_.loo_residuals() if self.n_neighbors is None else \
            self.model_.predict(X, exclude_self=True)
        self.norm_ = float(np.mean(np.exp(self.model_.predict(X))))
        return self

    def __call__(self, X) -> np.ndarray:
        return np.exp(self.model_.predict(X)) / self.norm_

    def leave_one_out(self) -> np.ndarray:
        """s at each training row from the fit without that row's residual (exact for kernel ridge; the row left
        out of its neighbourhood for KRRNN): what the leave-one-out z-scores of the recalibration must use. A
        fit-time quantity: a shape restored by ``from_state`` predicts but has none."""
        if not hasattr(self, "_loo"):
            raise RuntimeError("leave_one_out() exists only on the NoiseShape that was fitted, not on a loaded one")
        return np.exp(self._loo) / self.norm_

    def state(self) -> dict:
        return {"model": ridge_state(self.model_), "norm": self.norm_, "n_neighbors": self.n_neighbors}

    @classmethod
    def from_state(cls, state: dict) -> "NoiseShape":
        shape = cls(state["n_neighbors"])
        shape.model_, shape.norm_ = ridge_from_state(state["model"]), state["norm"]
        return shape

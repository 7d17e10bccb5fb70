"""The Δ-ratio misspecification test (the two-stage paper's Algorithm 2) and Automatic Kernel Search (Algorithm 3).

For a model fitted on part of a subsample, each held-out point gets Δ_i = |ε̂_i| / |(Sε̂_X)_i − ε̂_i|: its test
residual ε̂_i = y_i − m̂(x_i) over its distance from the model's own smoother S = K_*X(K_XX + λI)⁻¹ applied to the
training residuals ε̂_X. For a well-specified model Δ ≤ 1.1 with high probability (Theorem 2); the score of a kernel is
the fraction of held-out points with Δ ≤ 1.1, averaged over repeated farthest-point subsamples (random start, 80/20
split, the spec's choices). The model is kernel ridge with cross-validated λ and lengthscale (``model="krr"``, for
the mean) or a zero-mean GP whose output scale, lengthscale and noise maximise the marginal likelihood
(``model="gp"``, for the variance; scikit-learn's GaussianProcessRegressor, L-BFGS — a 400-point fit in well
under a second, where the paper ran 100 Adam steps).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Matern, WhiteKernel
from sklearn.kernel_ridge import KernelRidge

from neuralgp.twostage.ridge import KERNEL_NAMES, KernelRidgeCV, gram
from neuralgp.twostage.sampling import farthest_point_sampling

DELTA_THRESHOLD = 1.1  # Theorem 2
SUBSAMPLE = 500
REPEATS = 100


def _sklearn_kernel(name: str):
    base = {"rbf": RBF(1.0), "matern32": Matern(1.0, nu=1.5), "matern12": Matern(1.0, nu=0.5)}[name]
    return ConstantKernel(1.0) * base + WhiteKernel(0.1)


def _smoother_fit(kernel: str, model: str, X, y, seed: int):
    """(predict, smooth): the fitted model's mean at new points, and its smoother applied to new targets r at the
    same training inputs, evaluated at new points (S r)."""
    if model == "krr":
        krr = KernelRidgeCV(kernels=(kernel,), seed=seed).fit(X, y)

        def smooth(r, X_new):
            ridge = KernelRidge(alpha=krr.alpha_, kernel="precomputed").fit(gram(kernel, krr.length_scale_, X), r)
            return ridge.predict(gram(kernel, krr.length_scale_, X_new, X))
        return krr.predict, smooth
    with warnings.catch_warnings():  # residuals without structure drive the lengthscale to its bound: expected
        warnings.simplefilter("ignore", ConvergenceWarning)
        gp = GaussianProcessRegressor(_sklearn_kernel(kernel), normalize_y=False, random_state=seed).fit(X, y)
    fitted = gp.kernel_

    def smooth(r, X_new):  # the same kernel and noise, new targets: the posterior mean is S r
        return GaussianProcessRegressor(fitted, optimizer=None).fit(X, r).predict(X_new)
    return gp.predict, smooth


@dataclass
class DeltaTest:
    """Algorithm 2's result: P̂ (mean over repetitions of the fraction with Δ ≤ 1.1), the per-repetition
    fractions, and the decision at level δ (reject "well specified" when P̂ < 1 − δ)."""

    score: float
    fractions: list = field(default_factory=list)
    delta: float = 0.05

    @property
    def rejected(self) -> bool:
        return self.score < 1 - self.delta


def check_search_rows(n: int) -> None:
    """The Δ-test holds out 20 % of the rows: with fewer than 3, 80 % rounds to all of them."""
    if n < 3:
        raise ValueError(f"the kernel search holds out 20 % of the rows and needs at least 3, got {n}; "
                         "name the kernel instead (kernel='rbf', 'matern32' or 'matern12')")


def delta_ratio_test(X, y, kernel: str, model: str = "gp", repeats: int = REPEATS, subsample: int = SUBSAMPLE,
                     delta: float = 0.05, seed: int = 0) -> DeltaTest:
    """Algorithm 2 for ``kernel`` (one of rbf, matern32, matern12) and ``model`` ("gp" or "krr")."""
    if kernel not in KERNEL_NAMES:
        raise ValueError(f"unknown kernel {kernel!r}; use one of {KERNEL_NAMES}")
    if model not in ("gp", "krr"):
        raise ValueError(f"model must be 'gp' or 'krr', got {model!r}")
    X, y = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
    check_search_rows(len(y))
    rng = np.random.default_rng(seed)
    fractions = []
    for rep in range(int(repeats)):
        rows = farthest_point_sampling(X, min(subsample, len(y)), start="random", seed=seed + rep)
        rows = rng.permutation(rows)
        n_train = int(round(0.8 * len(rows)))
        tr, te = rows[:n_train], rows[n_train:]
        predict, smooth = _smoother_fit(kernel, model, X[tr], y[tr], seed + rep)
        resid_train, resid_test = y[tr] - predict(X[tr]), y[te] - predict(X[te])
        denominator = np.abs(smooth(resid_train, X[te]) - resid_test)
        with np.errstate(divide="ignore"):
            ratio = np.where(denominator > 0, np.abs(resid_test) / denominator, np.inf)  # Δ = ∞ counts as a failure
        fractions.append(float(np.mean(ratio <= DELTA_THRESHOLD)))
    return DeltaTest(float(np.mean(fractions)), fractions, delta)


def automatic_kernel_search(X, y, kernels=KERNEL_NAMES, model: str = "gp", repeats: int = REPEATS,
                            subsample: int = SUBSAMPLE, seed: int = 0) -> tuple[str, dict]:
    """Algorithm 3: the kernel with the highest Δ-test score (ties: the first in ``kernels``), and every score."""
    scores = {k: delta_ratio_test(X, y, k, model, repeats, subsample, seed=seed).score for k in kernels}
    best = max(kernels, key=lambda k: (scores[k], -list(kernels).index(k)))
    return best, scores

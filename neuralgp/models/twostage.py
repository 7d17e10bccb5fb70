"""Two-stage GPR (the two-stage paper's Algorithm 7): the predictive mean from kernel ridge regression (λ, kernel
and lengthscale by cross-validation), the predictive variance from a zero-mean GP fitted to the residuals — its
kernel found by automatic kernel search (Algorithm 3) or given, its hyper-parameters warm-started on a subsample.
N(KRR mean, GP variance + noise); the stage-2 GP's own mean is discarded, as in the paper.

Residuals: ``"in_sample"`` (the paper: KRR's errors on the points it was fitted to — too small, so the variance GP
learns too little noise) or ``"cross_fit"`` (K-fold: each point's residual from a KRR with the same
hyper-parameters that did not see it).
"""

from __future__ import annotations

import gpytorch
import numpy as np
import torch
from sklearn.base import clone
from sklearn.kernel_ridge import KernelRidge
from sklearn.model_selection import KFold

from neuralgp.datasets.scaling import Scaler
from neuralgp.io import register
from neuralgp.models.base import NeuralGPRegressor
from neuralgp.params import BOOL, NONE, POSITIVE_INT, SEED, Rule, integer, one_of
from neuralgp.twostage.kernel_search import automatic_kernel_search
from neuralgp.twostage.ridge import KERNEL_NAMES, KernelRidgeCV, gram
from neuralgp.twostage.variance import ZeroMeanGP, fit_variance_gp, predictive_variance

MEAN_MODELS = ("krr",)
CROSS_FIT_FOLDS = 5


def _is_regressor(v) -> bool:
    return hasattr(v, "fit") and hasattr(v, "predict") and not isinstance(v, str)


@register
class TwoStageGPRegressor(NeuralGPRegressor):
    """Two-stage GP: ``mean`` = "krr" or any scikit-learn regressor (cloned, fitted to the scaled data);
    ``variance`` = "exact" (the zero-mean GPyTorch GP); ``kernel`` = "auto" (search over rbf, matern32, matern12
    with ``aks_repeats`` subsamples) or one of them; ``warm_start`` = m rows for the hyper-parameters' first phase
    (None or False — scikit-learn's "no warm start" — for full training); ``residuals`` = "cross_fit" or
    "in_sample".

    Fitted: ``kernel_`` (the variance kernel's name), ``kernel_scores_`` (every candidate's search score; empty
    for a given kernel), ``mean_model_``, ``variance_model_``, ``fit_log_``.
    """

    param_rules = {"mean": (one_of(*MEAN_MODELS), Rule(_is_regressor, "a scikit-learn regressor")),
                   "variance": one_of("exact"), "kernel": one_of("auto", *KERNEL_NAMES),
                   "warm_start": (NONE, one_of(False), POSITIVE_INT), "residuals": one_of("cross_fit", "in_sample"),
                   "aks_repeats": POSITIVE_INT, "normalize_y": BOOL, "input_scaling": one_of(*Scaler.KINDS),
                   "seed": SEED, "verbose": BOOL}

    def __init__(self, mean="krr", variance="exact", kernel="auto", warm_start=200, residuals="cross_fit",
                 aks_repeats=20, normalize_y=True, input_scaling="standard", seed=0, verbose=True):
        self.mean = mean
        self.variance = variance
        self.kernel = kernel
        self.warm_start = warm_start
        self.residuals = residuals
        self.aks_repeats = aks_repeats
        self.normalize_y = normalize_y
        self.input_scaling = input_scaling
        self.seed = seed
        self.verbose = verbose

    def _mean_model(self):
        return KernelRidgeCV(seed=self.seed) if isinstance(self.mean, str) else clone(self.mean)

    def _residuals(self, X, y) -> np.ndarray:
        if self.residuals == "in_sample":
            return y - self.mean_model_.predict(X)
        out = np.empty_like(y)
        for train, held in KFold(min(CROSS_FIT_FOLDS, len(y)), shuffle=True, random_state=self.seed).split(X):
            if isinstance(self.mean, str):  # the chosen λ, kernel and lengthscale, refitted without the fold
                m = self.mean_model_
                ridge = KernelRidge(alpha=m.alpha_, kernel="precomputed").fit(
                    gram(m.kernel_, m.length_scale_, X[train]), y[train])
                out[held] = y[held] - ridge.predict(gram(m.kernel_, m.length_scale_, X[held], X[train]))
            else:
                out[held] = y[held] - clone(self.mean).fit(X[train], y[train]).predict(X[held])
        return out

    def _fit_scaled(self, X, y, X_val, y_val):
        if X_val is not None:  # nothing here stops early or recalibrates: the validation part is training data
            X, y = np.vstack([X, X_val]), np.concatenate([y, y_val])
        warm_start = self.warm_start or None  # False (scikit-learn's convention) means none
        if warm_start is not None and warm_start > len(y):
            raise ValueError(f"warm_start = {self.warm_start} is larger than the {len(y)} training rows; use at "
                             f"most {len(y)} or None (full training)")
        self.mean_model_ = self._mean_model().fit(X, y)
        resid = self._residuals(X, y)
        if self.kernel == "auto":
            self.kernel_, self.kernel_scores_ = automatic_kernel_search(X, resid, model="gp",
                                                                        repeats=self.aks_repeats, seed=self.seed)
        else:
            self.kernel_, self.kernel_scores_ = self.kernel, {}
        self.variance_model_, self.fit_log_ = fit_variance_gp(X, resid, self.kernel_, warm_start, self.seed)
        return self

    def _predict_scaled(self, X):
        mean = np.asarray(self.mean_model_.predict(X), dtype=np.float64)
        var_f, noise = predictive_variance(self.variance_model_, X)
        return mean, var_f, var_f + noise

    @property
    def noise_variance_(self) -> float:
        self._check_fitted()
        return float(self.variance_model_.likelihood.noise.detach()) * self._y_scale ** 2 * self.variance_scale

    def _fitted_state(self) -> dict:
        if not isinstance(self.mean, str):
            raise NotImplementedError("save() keeps the KRR mean only; a model with a scikit-learn mean regressor "
                                      "cannot be saved this way (pickle it yourself)")
        m, gp = self.mean_model_, self.variance_model_
        return {"krr": {"kernel": m.kernel_, "length_scale": m.length_scale_, "alpha": m.alpha_,
                        "X": torch.as_tensor(m.X_fit_), "dual_coef": torch.as_tensor(m.dual_coef_)},
                "gp": {"kernel": self.kernel_, "X": gp.train_inputs[0], "r": gp.train_targets,
                       "state": gp.state_dict()}, "kernel_scores": self.kernel_scores_}

    def _restore(self, state: dict):
        k = state["krr"]
        m = KernelRidgeCV(seed=self.seed)
        m.kernel_, m.length_scale_, m.alpha_, m.X_fit_ = k["kernel"], k["length_scale"], k["alpha"], k["X"].numpy()
        m.dual_coef_ = k["dual_coef"].numpy()
        self.mean_model_ = m
        g = state["gp"]
        gp = ZeroMeanGP(g["X"], g["r"], gpytorch.likelihoods.GaussianLikelihood().double(), g["kernel"]).double()
        gp.load_state_dict(g["state"])
        gp.eval()
        self.variance_model_, self.kernel_, self.kernel_scores_ = gp, g["kernel"], state["kernel_scores"]

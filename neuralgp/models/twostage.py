"""Two-stage GPR: the predictive mean from kernel ridge regression (λ, kernel and lengthscale by cross-validation),
the predictive variance from a zero-mean GP fitted to the residuals — its kernel found by automatic kernel search
(Algorithm 3) or given. N(mean, GP variance + noise); the stage-2 GP's own mean is discarded, as in the paper.

Exact pipeline (Algorithm 7, ``mean="krr", variance="exact"``): KRR on all rows; the variance GP's
hyper-parameters warm-started on a subsample. Scalable pipeline (Algorithm 6, ``mean="krrnn", variance="gpnn"``,
registry ``twostage-nn``): the KRR hyper-parameters chosen on a subsample, each prediction kernel ridge on the w
nearest training rows (KRRNN); the variance from GPnn (hyper-parameters on random subsets, an exact GP on the w
nearest residuals). ``variance="svgp"``: GPyTorch's SVGP on the residuals (the paper's suggested alternative).

Residuals: ``"in_sample"`` (the paper: the mean model's errors on the points it was fitted to — too small, so the
variance GP learns too little noise) or ``"cross_fit"`` (each point's residual from a mean model that did not see
it: exact leave-one-out for KRR with the chosen hyper-parameters, the point left out of its neighbourhood for
KRRNN, K-fold refits for another regressor).
"""

from __future__ import annotations

import time

import gpytorch
import numpy as np
import torch
from sklearn.base import clone
from sklearn.model_selection import KFold

from neuralgp.datasets.scaling import Scaler
from neuralgp.errors import ResourceLimitError
from neuralgp.io import register
from neuralgp.models.base import NeuralGPRegressor, device_memory_gb, z2_moments
from neuralgp.models.baselines import SVGPRegressor
from neuralgp.models.gpnn import GPnnRegressor
from neuralgp.params import BOOL, DEVICE, NONE, POSITIVE, POSITIVE_INT, PREDICTIVE, SEED, Rule, one_of
from neuralgp.twostage.kernel_search import automatic_kernel_search, check_search_rows
from neuralgp.twostage.noise import NoiseShape
from neuralgp.twostage.ridge import (ARD_STEPS, KERNEL_NAMES, fit_kernel_ridge, refit_kernel_ridge, ridge_from_state,
                                    ridge_state)
from neuralgp.twostage.variance import ZeroMeanGP, fit_variance_gp, leave_one_out, predictive_variance

MEAN_MODELS = ("krr", "krr-ard", "krrnn")
VARIANCE_MODELS = ("exact", "gpnn", "svgp")
MEMORY_MATRICES = 10  # the exact pipeline's peak (the variance GP's gradient step) in float64 n × n matrices:
# measured 11.8 at n = 3000 and 8.6 at n = 5000 on a CPU (peak RSS), at least 7.9 at n = 41k on an H200 (an OOM)
CROSS_FIT_FOLDS = 5
SHAPE_FOLDS = 10  # the noise shape's held-out folds: 5 (80 % of the rows) made yacht's errors too large (z² 0.5)
AUTO_WARM_START = 200  # the paper's subsample (spec §4.6)
GPNN_ITERATIONS, GPNN_LR = 200, 0.1  # Table 7


def _is_regressor(v) -> bool:
    return hasattr(v, "fit") and hasattr(v, "predict") and not isinstance(v, str)


def _is_auto(v) -> bool:
    return isinstance(v, str) and v == "auto"


@register
class TwoStageGPRegressor(NeuralGPRegressor):
    """Two-stage GP: ``mean`` = "auto" (the default: "krr-ard" where the exact pipeline fits in memory, else
    "krrnn"), "krr-ard" (kernel ridge whose search also tries one lengthscale per
    input, from a GP's marginal likelihood on a subsample, ``KernelRidgeCV(ard=True)``; chosen over "krr" on the
    calibration suite's sets and Table 2's: docs/methods/twostage.md, "The default since 2026-11-27"), "krr" (the
    paper's isotropic search only), "krrnn" (kernel ridge on the ``n_neighbors`` nearest rows), any scikit-learn
    regressor (cloned, fitted to the scaled data) or None — one stage: the variance
    GP fitted to the targets themselves gives the mean too (the paper's Exact-GP baseline, zero prior mean on
    standardised y); ``variance`` = "auto" (the default: "exact" where the exact pipeline fits in memory —
    ``max_memory_gb`` below — else "gpnn": Algorithm 7 up to about 17 000 rows on a 24 GB machine, Algorithm 6 past
    it, instead of a refusal; docs/methods/twostage.md, "The pipeline by size"), "exact" (the zero-mean GPyTorch GP),
    "gpnn" (GPnn with ``n_neighbors``
    neighbours, no recalibration, as Algorithm 6) or "svgp" (GPyTorch SVGP at its defaults); ``kernel`` = "auto"
    (search over rbf, matern32, matern12 with ``aks_repeats`` subsamples) or one of them; ``ard_steps`` = the
    marginal-likelihood steps of each GP that gives krr-ard's ARD candidates (18 of them: most of a fit's time);
    ``warm_start`` = m rows for the exact variance GP's first phase ("auto": 200 — the paper's — when there are more
    than 400 rows, else none; None or False — scikit-learn's "no warm start" — for full training);
    ``residuals`` = "cross_fit" or "in_sample"; ``device`` = where the exact variance GP and kernel ridge (the
    mean, the noise shape) compute ("cuda" for their O(n³) Cholesky and eigendecomposition steps at large n), and
    GPnn or SVGP (their own ``device``); the kernel search's 500-row fits and KRRNN's small solves stay on the CPU);
    ``recalibrate`` = scale the variances by α from the training rows' leave-one-out z-scores (``_leave_one_out``;
    with the noise shape, the held-out folds' z-scores of ``_held_out_shape``; the paper has no such step: False
    gives its algorithms);
    ``noise`` = "heteroscedastic" (σ² s(x), s from kernel ridge on the log squared cross-fitted residuals, its
    strength chosen on held-out folds, ``neuralgp.twostage.noise``; KRRNN on ``n_neighbors`` for a variance model
    other than the exact GP; the rows' z-scores for the recalibration are then the held-out folds'),
    "homoscedastic" (the paper's one σ²) or "auto": heteroscedastic with a mean model and the exact variance GP
    (docs/methods/twostage.md), one σ² with GPnn or SVGP (the shape is not measured there) or mean=None;
    ``predictive`` = "student_t" (the default): a Student-t with the model's mean and variance, its degrees of
    freedom ``predictive_df_`` fitted by maximum likelihood to the same held-out z-scores as the recalibration
    (``student_t_df``; beyond the paper: the errors of real data are peaked and heavy-tailed — calibrated on 21 of
    21 sets of the calibration suite against the Gaussian's 20, NLL lower on 19: docs/methods/twostage.md), or
    "gaussian" (the paper's N(mean, variance)); ``max_memory_gb`` = the exact pipeline's memory budget: past it
    (its peak is about ``MEMORY_MATRICES`` float64 n × n matrices) "auto" fits the scalable pipeline and
    ``variance="exact"`` refuses before any work (ResourceLimitError); None (the default): the device's memory
    (``device_memory_gb``).

    Fitted: ``mean_used_`` and ``variance_used_`` (what "auto" chose, else the parameters), ``kernel_`` (the
    variance kernel's name), ``kernel_scores_`` (every candidate's search score; empty
    for a given kernel), ``mean_model_``, ``variance_model_`` (fitted to the residuals divided by
    ``residual_scale_``, their root mean square), ``noise_shape_`` (the NoiseShape, or None), ``fit_log_``,
    ``stage_seconds_`` (wall-clock of the mean model, the kernel search and the variance model).
    """

    param_rules = {"mean": (NONE, one_of("auto", *MEAN_MODELS), Rule(_is_regressor, "a scikit-learn regressor")),
                   "variance": one_of("auto", *VARIANCE_MODELS), "kernel": one_of("auto", *KERNEL_NAMES),
                   "n_neighbors": POSITIVE_INT,
                   "warm_start": (NONE, one_of(False, "auto"), POSITIVE_INT),
                   "residuals": one_of("cross_fit", "in_sample"),
                   "aks_repeats": POSITIVE_INT, "ard_steps": POSITIVE_INT, "max_memory_gb": (NONE, POSITIVE),
                   "normalize_y": BOOL, "input_scaling": one_of(*Scaler.KINDS),
                   "recalibrate": BOOL, "noise": one_of("auto", "homoscedastic", "heteroscedastic"),
                   "predictive": PREDICTIVE, "seed": SEED,
                   "device": DEVICE, "verbose": BOOL}

    def __init__(self, mean="auto", variance="auto", kernel="auto", warm_start="auto", residuals="cross_fit",
                 n_neighbors=50, aks_repeats=20, ard_steps=ARD_STEPS, max_memory_gb=None, normalize_y=True,
                 input_scaling="standard",
                 recalibrate=True, noise="auto", predictive="student_t", seed=0, device="cpu", verbose=True):
        self.mean = mean
        self.variance = variance
        self.kernel = kernel
        self.n_neighbors = n_neighbors
        self.warm_start = warm_start
        self.residuals = residuals
        self.aks_repeats = aks_repeats
        self.ard_steps = ard_steps
        self.max_memory_gb = max_memory_gb
        self.normalize_y = normalize_y
        self.input_scaling = input_scaling
        self.recalibrate = recalibrate
        self.noise = noise
        self.predictive = predictive
        self.seed = seed
        self.device = device
        self.verbose = verbose

    def _fit_mean(self, X, y, loo: bool):
        mean = self.mean_used_
        if isinstance(mean, str):
            return fit_kernel_ridge(X, y, self.n_neighbors if mean == "krrnn" else None, self.seed,
                                    device=self.device, loo=loo, ard=mean == "krr-ard", ard_steps=self.ard_steps)
        return clone(mean).fit(X, y)

    def _residuals(self, X, y, cross_fit: bool, mean_model=None) -> np.ndarray:
        """The residuals of ``mean_model`` (default ``mean_model_``), fitted to (X, y): in-sample, or cross-fitted —
        exact leave-one-out for KRR and KRRNN (each row's residual from the same hyper-parameters without it),
        K-fold refits for another regressor."""
        mean_model = self.mean_model_ if mean_model is None else mean_model
        if self.mean_used_ == "krrnn":
            return y - mean_model.predict(X, exclude_self=cross_fit)
        if not cross_fit:
            return y - mean_model.predict(X)
        if self.mean_used_ in ("krr", "krr-ard"):
            return mean_model.loo_residuals()
        out = np.empty_like(y)
        for train, held in KFold(min(CROSS_FIT_FOLDS, len(y)), shuffle=True, random_state=self.seed).split(X):
            out[held] = y[held] - clone(self.mean_used_).fit(X[train], y[train]).predict(X[held])
        return out

    def _fit_scaled(self, X, y, X_val, y_val):
        if X_val is not None:  # nothing here stops early, α is leave-one-out: the validation part is training data
            X, y = np.vstack([X, X_val]), np.concatenate([y, y_val])
        need = MEMORY_MATRICES * 8 * len(y) ** 2 / 1e9
        limit = self.max_memory_gb or device_memory_gb(self.device)
        exact_fits = need <= limit
        mean = self.mean if not _is_auto(self.mean) else "krr-ard" if exact_fits else "krrnn"
        variance = self.variance if self.variance != "auto" else \
            "exact" if exact_fits or mean is None else "gpnn"
        warm_start = self.warm_start or None  # False (scikit-learn's convention) means none
        if warm_start == "auto":
            warm_start = AUTO_WARM_START if len(y) > 2 * AUTO_WARM_START else None
        if variance == "exact" and warm_start is not None and warm_start > len(y):
            raise ValueError(f"warm_start = {self.warm_start} is larger than the {len(y)} training rows; use at "
                             f"most {len(y)} or None (full training)")
        if variance == "exact" and not exact_fits:
            source = f"max_memory_gb = {self.max_memory_gb}" if self.max_memory_gb else \
                f"the {limit:.1f} GB of device {self.device!r} (max_memory_gb overrides it)"
            raise ResourceLimitError(f"the exact variance GP on n = {len(y)} needs about {need:.1f} GB > {source}; "
                                     f"use the scalable pipeline (mean='krrnn', variance='gpnn': registry name "
                                     f"twostage-nn; what mean='auto', variance='auto' choose here) or a device "
                                     f"with more memory")
        if mean is None and self.noise == "heteroscedastic":
            raise ValueError("noise='heteroscedastic' shapes the noise from a mean model's held-out errors: give a "
                             "mean model, or noise='homoscedastic' with mean=None (one stage)")
        if mean is None and variance != "exact":
            raise ValueError(f"mean=None (one stage) needs variance='exact', not {variance!r}")
        if self.verbose and not exact_fits and (_is_auto(self.mean) or self.variance == "auto"):
            print(f"two-stage: the exact pipeline on n = {len(y)} would need about {need:.1f} GB > {limit:.1f} GB; "
                  f"fitting the scalable one (mean={mean!r}, variance={variance!r})")
        self.mean_used_, self.variance_used_ = mean, variance
        if self.kernel == "auto":
            check_search_rows(len(y))
        shaped = self.noise == "heteroscedastic" or (self.noise == "auto" and self.variance_used_ == "exact"
                                                      and self.mean_used_ is not None)
        heavy_tailed = self.predictive == "student_t"
        held_out = self.recalibrate or shaped or heavy_tailed  # the steps that need errors the mean model did not see
        clock = time.perf_counter()
        self.mean_model_ = None if self.mean_used_ is None else \
            self._fit_mean(X, y, loo=held_out or self.residuals == "cross_fit")
        resid = y if self.mean_used_ is None else self._residuals(X, y, self.residuals == "cross_fit")
        # the variance model sees residuals of unit mean square: its hyper-parameters start (GPyTorch's 0.693) and
        # move (100 steps at lr 0.1) on the scale they were made for — unscaled, the noise of a nearly exact mean
        # cannot get below ~0.006 in 100 steps however small the residuals are
        self.residual_scale_ = float(np.sqrt(np.mean(resid ** 2))) or 1.0
        resid = resid / self.residual_scale_
        self.stage_seconds_ = {"mean": time.perf_counter() - clock}
        clock = time.perf_counter()
        if self.kernel == "auto":
            self.kernel_, self.kernel_scores_ = automatic_kernel_search(X, resid, model="gp",
                                                                        repeats=self.aks_repeats, seed=self.seed)
        else:
            self.kernel_, self.kernel_scores_ = self.kernel, {}
        self.stage_seconds_["search"] = time.perf_counter() - clock
        clock = time.perf_counter()
        if self.variance_used_ == "exact":
            self.variance_model_, self.fit_log_ = fit_variance_gp(X, resid, self.kernel_, warm_start, self.seed,
                                                                   device=self.device)
        else:  # a library estimator on the (already scaled) residuals, its own scaling off
            self.variance_model_ = self._variance_estimator().fit(X, resid)
            self.fit_log_ = {"train_log": self.variance_model_.train_log_}
        self.noise_shape_ = None
        if held_out:
            honest = resid if self.mean_used_ is None or self.residuals == "cross_fit" else \
                self._residuals(X, y, cross_fit=True) / self.residual_scale_
            err, var_f, noise = self._leave_one_out(X, honest)
            if shaped:
                self.noise_shape_ = NoiseShape(None if self.variance_used_ == "exact" else self.n_neighbors,
                                               self.seed, device=self.device).fit(X, err)
                err, shape = self._held_out_shape(X, y, var_f, noise)
                noise = noise * shape
            var = np.maximum(var_f + noise, np.finfo(np.float64).tiny)
            if self.recalibrate:
                self._apply_recalibration(z2_moments(err ** 2 / var), "held_out_folds" if shaped else "leave_one_out")
            self._fit_predictive_shape(err ** 2 / (self.variance_scale * var))  # with predictive="student_t"
        self.stage_seconds_["variance"] = time.perf_counter() - clock
        return self

    def _held_out_shape(self, X, y, var_f, noise) -> tuple[np.ndarray, np.ndarray]:
        """Choose the noise shape's strength ρ on held-out rows, and return their errors and s (in the units of
        the variance model's residuals) for the recalibration: per fold (``SHAPE_FOLDS``, shuffled), the mean
        model's hyper-parameters refitted without the fold give its rows' errors, and the shape's refitted on that
        model's honest residuals gives their s. The leave-one-out variances of the variance model stand in for
        its fold refits (the GP itself is not refitted)."""
        folds, err = [], np.empty_like(y)
        for train, held in KFold(min(SHAPE_FOLDS, len(y)), shuffle=True, random_state=self.seed).split(X):
            if isinstance(self.mean_used_, str):
                mean = refit_kernel_ridge(self.mean_model_, X[train], y[train], loo=True)
            else:
                mean = clone(self.mean_used_).fit(X[train], y[train])
            err[held] = y[held] - mean.predict(X[held])
            folds.append((train, held, self._residuals(X[train], y[train], True, mean) / self.residual_scale_))
        err /= self.residual_scale_
        g, norms = self.noise_shape_.held_out_log_shapes(X, folds)
        return err, self.noise_shape_.choose_strength(err, var_f, noise, g, norms)

    def _leave_one_out(self, X, resid) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(error, variance of f, noise variance) of each training row under the prediction made without it: the
        cross-fitted residual (the error of a mean model that did not see the row; with mean=None, the GP's own
        leave-one-out error) and the variance model's leave-one-out variance split into f and noise (closed form
        for the exact GP, the row left out of its neighbourhood for GPnn; SVGP's own variance, which reaches the
        rows only through its inducing points). The predictive for a new point pairs the same two: an error the
        model never saw, a variance from the other rows."""
        if self.variance_used_ == "exact":
            loo_mean, loo_var = leave_one_out(self.variance_model_)
            noise = np.full_like(loo_var, float(self.variance_model_.likelihood.noise.detach()))
            var_f = np.maximum(loo_var - noise, 0.0)
        else:
            loo_mean, var_f, loo_var = self.variance_model_._predict_scaled(X, exclude_self=True) \
                if self.variance_used_ == "gpnn" else self.variance_model_._predict_scaled(X)
            noise = loo_var - var_f
        err = resid - loo_mean if self.mean_used_ is None else resid
        return err, var_f, noise

    def _variance_estimator(self):
        scaling = {"input_scaling": "none", "normalize_y": False, "seed": self.seed, "device": self.device,
                   "verbose": self.verbose}
        if self.variance_used_ == "gpnn":
            return GPnnRegressor(n_neighbors=self.n_neighbors, kernel=self.kernel_, max_iter=GPNN_ITERATIONS,
                                 lr=GPNN_LR, validation_fraction=0.0, **scaling)
        return SVGPRegressor(base_kernel=self.kernel_, **scaling)

    def _predict_scaled(self, X):
        s, s2 = self.residual_scale_, self.residual_scale_ ** 2
        if self.variance_used_ == "exact":
            gp_mean, var_f, noise = predictive_variance(self.variance_model_, X)
            mean = gp_mean * s if self.mean_used_ is None else np.asarray(self.mean_model_.predict(X), dtype=np.float64)
        else:
            mean = np.asarray(self.mean_model_.predict(X), dtype=np.float64)
            dist = self.variance_model_.predict_dist(X)
            var_f, noise = dist["var_f"], dist["var_y"] - dist["var_f"]
        if self.noise_shape_ is not None:  # set by fit and by load
            noise = noise * self.noise_shape_(X)
        return mean, var_f * s2, (var_f + noise) * s2

    @property
    def noise_variance_(self) -> float:
        """σ² in the units of y² (with heteroscedastic noise: its mean over the training rows)."""
        self._check_fitted()
        if self.variance_used_ == "exact":
            noise = float(self.variance_model_.likelihood.noise.detach())
        else:
            noise = self.variance_model_.noise_variance_
        return noise * self.residual_scale_ ** 2 * self._y_scale ** 2 * self.variance_scale

    def _fitted_state(self) -> dict:
        if not (self.mean_used_ is None or isinstance(self.mean_used_, str)):
            raise NotImplementedError("save() keeps a KRR or KRRNN mean only; a model with a scikit-learn mean "
                                      "regressor cannot be saved this way (pickle it yourself)")
        mean = None if self.mean_used_ is None else ridge_state(self.mean_model_)
        if self.variance_used_ == "exact":
            gp = self.variance_model_
            variance = {"X": gp.train_inputs[0].cpu(), "r": gp.train_targets.cpu(),
                        "state": {k: v.cpu() for k, v in gp.state_dict().items()}}
        else:
            variance = self.variance_model_._payload()
        shape = None if self.noise_shape_ is None else self.noise_shape_.state()
        return {"mean": mean, "variance": variance, "mean_used": self.mean_used_,
                "variance_used": self.variance_used_, "kernel": self.kernel_, "kernel_scores": self.kernel_scores_,
                "residual_scale": self.residual_scale_, "noise_shape": shape}

    def _restore(self, state: dict):
        # files from before mean="auto" / variance="auto" hold no resolved names: their parameters were the names
        self.mean_used_ = state.get("mean_used", self.mean)
        self.variance_used_ = state.get("variance_used", self.variance)
        self.mean_model_ = None if state["mean"] is None else ridge_from_state(state["mean"], self.device)
        self.kernel_, self.kernel_scores_ = state["kernel"], state["kernel_scores"]
        self.residual_scale_ = state["residual_scale"]
        shape = state.get("noise_shape")  # files from before the option have none
        self.noise_shape_ = None if shape is None else NoiseShape.from_state(shape, self.device)
        g = state["variance"]
        if self.variance_used_ == "exact":
            gp = ZeroMeanGP(g["X"].to(self.device), g["r"].to(self.device), gpytorch.likelihoods.GaussianLikelihood(),
                            self.kernel_).to(device=self.device, dtype=torch.float64)
            gp.load_state_dict(g["state"])
            gp.eval()
            self.variance_model_ = gp
        else:
            cls = GPnnRegressor if self.variance_used_ == "gpnn" else SVGPRegressor
            self.variance_model_ = cls._from_payload(g)

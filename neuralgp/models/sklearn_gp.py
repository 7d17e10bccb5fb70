"""scikit-learn's ``GaussianProcessRegressor`` in neuralgp's interface: the small-data GP users already trust.

The setting users reach for: ARD RBF times a constant plus white noise, inputs standardised, targets normalised, the
L-BFGS marginal-likelihood fit restarted ``n_restarts_optimizer`` times; ``ard=False``: one lengthscale for all
inputs (fewer hyper-parameters to over-fit on small data: docs/methods/baselines.md, "Where baselines stay at the
mean"). A validation part given to ``fit`` is added to the training data (nothing here stops early). O(n³) time and
O(n²) memory: past ``max_train_size`` rows ``fit`` stops with ``ResourceLimitError`` before allocating. Saved files
hold the (scaled) training data and the fitted kernel; loading refits the posterior with the optimiser off.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

from neuralgp.datasets.scaling import Scaler
from neuralgp.errors import ResourceLimitError
from neuralgp.io import register
from neuralgp.models.base import NeuralGPRegressor
from neuralgp.params import BOOL, NON_NEGATIVE, POSITIVE_INT, SEED, integer, one_of


@register
class SklearnGPRegressor(NeuralGPRegressor):
    """Exact GP from scikit-learn: k = c·RBF (ARD unless ``ard=False``) + white noise, ``n_restarts_optimizer``
    L-BFGS restarts."""

    param_rules = {"n_restarts_optimizer": integer(0), "ard": BOOL, "max_train_size": POSITIVE_INT, "normalize_y": BOOL,
                   "input_scaling": one_of(*Scaler.KINDS), "jitter": NON_NEGATIVE, "seed": SEED, "verbose": BOOL}

    def __init__(self, n_restarts_optimizer=2, ard=True, max_train_size=5000, jitter=1e-10, normalize_y=True,
                 input_scaling="standard", seed=0, verbose=True):
        self.n_restarts_optimizer = n_restarts_optimizer
        self.ard = ard
        self.max_train_size = max_train_size
        self.jitter = jitter
        self.normalize_y = normalize_y
        self.input_scaling = input_scaling
        self.seed = seed
        self.verbose = verbose

    def _kernel(self, n_features: int):
        return ConstantKernel(1.0) * RBF(np.ones(n_features) if self.ard else 1.0) + WhiteKernel(1.0)

    def _gpr(self, kernel, optimize: bool) -> GaussianProcessRegressor:
        return GaussianProcessRegressor(kernel, alpha=self.jitter, optimizer="fmin_l_bfgs_b" if optimize else None,
                                        n_restarts_optimizer=self.n_restarts_optimizer, random_state=self.seed)

    def _fit_scaled(self, X, y, X_val, y_val):
        if X_val is not None:
            X, y = np.vstack([X, X_val]), np.concatenate([y, y_val])
        if len(y) > self.max_train_size:
            raise ResourceLimitError(
                f"SklearnGPRegressor on n = {len(y)} rows needs O(n³) time and {8 * len(y) ** 2 * 3 / 1e9:.1f} GB; "
                f"max_train_size = {self.max_train_size}. Use a sparse or weight-space model (sgpr, svgp, dbk)")
        self.gpr_ = self._gpr(self._kernel(X.shape[1]), optimize=True).fit(X, y)
        return self

    def _predict_scaled(self, X):
        mean, std = self.gpr_.predict(X, return_std=True)
        var_y = std ** 2
        noise = self.gpr_.kernel_.k2.noise_level
        return mean, np.maximum(var_y - noise, 0.0), var_y

    @property
    def noise_variance_(self) -> float:
        """Fitted white-noise variance in the units of y²."""
        self._check_fitted()
        return float(self.gpr_.kernel_.k2.noise_level) * self._y_scale ** 2 * self.variance_scale

    @property
    def kernel_(self):
        """The fitted scikit-learn kernel (on scaled inputs and targets)."""
        self._check_fitted()
        return self.gpr_.kernel_

    def _fitted_state(self) -> dict:
        return {"X": torch.as_tensor(self.gpr_.X_train_), "y": torch.as_tensor(self.gpr_.y_train_),
                "theta": torch.as_tensor(self.gpr_.kernel_.theta)}

    def _restore(self, state: dict):
        kernel = self._kernel(self.n_features_in_).clone_with_theta(state["theta"].numpy())
        self.gpr_ = self._gpr(kernel, optimize=False).fit(state["X"].numpy(), state["y"].numpy())

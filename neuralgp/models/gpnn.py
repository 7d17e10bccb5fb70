"""GPnn (Allison et al. 2023): kernel hyper-parameters from random subsets, and each prediction an exact GP
on the ``n_neighbors`` nearest training points (scikit-learn's NearestNeighbors; GPyTorch kernels).

Used by FM-GP's tables and by the two-stage method. The kernel is the exponential (Matérn-1/2) one of both
papers by default. Like the exact GP peers, a saved GPnn holds its (scaled) training data.
"""

from __future__ import annotations

import warnings

import gpytorch
import numpy as np
import torch
from gpytorch.constraints import GreaterThan
from gpytorch.distributions import MultivariateNormal
from sklearn.neighbors import NearestNeighbors
from torch import nn

from neuralgp.chunking import NEIGHBOUR_ROWS
from neuralgp.io import register
from neuralgp.kernels import STATIONARY_KERNELS, make_kernel
from neuralgp.datasets.scaling import Scaler
from neuralgp.models.base import NeuralGPRegressor
from neuralgp.neighbours import nearest_rows
from neuralgp.params import BOOL, COMMON_RULES, NON_NEGATIVE, POSITIVE, POSITIVE_INT, VALIDATION_FRACTION, one_of
from neuralgp.train import train, training_subsets




@register
class GPnnRegressor(NeuralGPRegressor):
    """GPnn, the nearest-neighbour GP of Allison et al. (2023): ``fit`` learns (lengthscale, σ_f², σ²) on ``n_subsets`` subsets of ≤ ``subset_size``
    (Adam, summed exact marginal likelihoods); ``predict`` conditions on the k nearest neighbours of each point.
    ``fit(X, y, X_cal, y_cal)`` recalibrates the variances on (X_cal, y_cal) like FM-GP.
    """

    param_rules = {"n_neighbors": POSITIVE_INT, "kernel": one_of(*STATIONARY_KERNELS), "n_subsets": POSITIVE_INT,
                   "subset_size": POSITIVE_INT, "max_iter": POSITIVE_INT, "lr": POSITIVE, "noise_init": POSITIVE,
                   "noise_min": NON_NEGATIVE, "normalize_y": BOOL, "input_scaling": one_of(*Scaler.KINDS),
                   "validation_fraction": VALIDATION_FRACTION, **COMMON_RULES}

    def __init__(self, n_neighbors=400, kernel="matern12", n_subsets=10, subset_size=300, max_iter=200, lr=0.1,
                 noise_init=0.1, noise_min=1e-6, max_time=None, normalize_y=True, input_scaling="standard",
                 validation_fraction=0.1, seed=0, device="cpu", verbose=True):
        self.n_neighbors = n_neighbors
        self.kernel = kernel
        self.n_subsets = n_subsets
        self.subset_size = subset_size
        self.max_iter = max_iter
        self.lr = lr
        self.noise_init = noise_init
        self.noise_min = noise_min
        self.max_time = max_time
        self.normalize_y = normalize_y
        self.input_scaling = input_scaling
        self.validation_fraction = validation_fraction
        self.seed = seed
        self.device = device
        self.verbose = verbose

    def fit(self, X, y, X_cal=None, y_cal=None):
        """Estimate hyper-parameters on subsets, index the training set, then ``recalibrate`` on (X_cal, y_cal) —
        or, when none is given, on a random ``validation_fraction`` of (X, y) held out from training."""
        return NeuralGPRegressor.fit(self, X, y, X_cal, y_cal)

    validation_names = ("X_cal", "y_cal")

    def recalibrates_on_validation(self) -> bool:
        return True

    def _build(self):
        self.covar_ = make_kernel(self.kernel).to(device=self.device, dtype=torch.float64)
        self.likelihood_ = gpytorch.likelihoods.GaussianLikelihood(noise_constraint=GreaterThan(self.noise_min))
        self.likelihood_.to(device=self.device, dtype=torch.float64)
        self.likelihood_.noise = self.noise_init

    def _fit_scaled(self, X, y, X_val, y_val):
        self._build()
        subsets = training_subsets(len(y), self.n_subsets, min(self.subset_size, max(len(y) // self.n_subsets, 1)),
                                   self.seed)
        Xs = torch.as_tensor(np.stack([X[s] for s in subsets]), device=self.device)
        ys = torch.as_tensor(np.stack([y[s] for s in subsets]), device=self.device)
        modules = nn.ModuleList([self.covar_, self.likelihood_])
        opt = torch.optim.Adam(modules.parameters(), lr=self.lr)

        def step():
            opt.zero_grad(set_to_none=True)
            prior = MultivariateNormal(torch.zeros_like(ys), self.covar_(Xs))
            loss = -self.likelihood_(prior).log_prob(ys).sum() / ys.numel()
            loss.backward()
            opt.step()
            return loss.item()

        self.train_log_ = train(modules, step, self.max_iter, None, eval_every=max(1, self.max_iter // 20),
                                verbose=self.verbose, desc="GPnn", max_seconds=self.max_time)
        self.n_iter_ = self.train_log_.steps
        self._index(X, y)
        return self

    def _index(self, X, y):
        self.train_X_, self.train_y_ = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
        self.neighbors_ = NearestNeighbors(n_neighbors=min(self.n_neighbors, len(y))).fit(self.train_X_)

    def _predict_scaled(self, X, exclude_self: bool = False):
        """(mean, var_f, var_y) at scaled X; ``exclude_self``: X are the training rows, in order, each left out of
        its own neighbourhood (``nearest_rows``): leave-one-out predictions."""
        k = min(self.n_neighbors, len(self.train_y_) - int(exclude_self))
        means, var_fs = [], []
        noise = self.likelihood_.noise.detach().squeeze()
        for start in range(0, len(X), NEIGHBOUR_ROWS):
            Xq = X[start:start + NEIGHBOUR_ROWS]
            idx = nearest_rows(self.neighbors_, Xq, k, np.arange(start, start + len(Xq)) if exclude_self else None)
            Xn = torch.as_tensor(self.train_X_[idx], device=self.device)  # (m, k, d)
            yn = torch.as_tensor(self.train_y_[idx], device=self.device)
            xq = torch.as_tensor(Xq, device=self.device).unsqueeze(1)     # (m, 1, d)
            with torch.no_grad():
                K = self.covar_(Xn).to_dense() + noise * torch.eye(k, dtype=torch.float64, device=self.device)
                kx = self.covar_(xq, Xn).to_dense()                         # (m, 1, k)
                L = torch.linalg.cholesky(K)
                means.append((kx @ torch.cholesky_solve(yn.unsqueeze(-1), L)).reshape(-1))
                v = torch.linalg.solve_triangular(L, kx.mT, upper=False)
                prior = self.covar_.outputscale.detach()
                var_fs.append((prior - (v ** 2).sum((-2, -1))).clamp_min(0))
        mean, var_f = torch.cat(means), torch.cat(var_fs)
        return mean.cpu().numpy(), var_f.cpu().numpy(), (var_f + noise).cpu().numpy()

    @property
    def noise_variance_(self) -> float:
        self._check_fitted()
        return float(self.likelihood_.noise.detach()) * self._y_scale ** 2 * self.variance_scale

    def _fitted_state(self) -> dict:
        return {"covar": {k: v.cpu() for k, v in self.covar_.state_dict().items()},
                "likelihood": {k: v.cpu() for k, v in self.likelihood_.state_dict().items()},
                "train_X": torch.as_tensor(self.train_X_), "train_y": torch.as_tensor(self.train_y_),
                "n_iter": self.n_iter_}

    def _restore(self, state: dict):
        self._build()
        self.covar_.load_state_dict(state["covar"])
        self.likelihood_.load_state_dict(state["likelihood"])
        self._index(state["train_X"].numpy(), state["train_y"].numpy())
        self.n_iter_ = state["n_iter"]


@register
class NNGPRegressor(GPnnRegressor):
    """Deprecated name of ``GPnnRegressor`` (removed in 0.3): "NNGP" usually means the neural-network GP."""

    def __init__(self, n_neighbors=400, kernel="matern12", n_subsets=10, subset_size=300, max_iter=200, lr=0.1,
                 noise_init=0.1, noise_min=1e-6, max_time=None, normalize_y=True, input_scaling="standard",
                 validation_fraction=0.1, seed=0, device="cpu", verbose=True):
        warnings.warn("NNGPRegressor is now GPnnRegressor; the old name goes in neuralgp 0.3", FutureWarning,
                      stacklevel=2)
        super().__init__(n_neighbors, kernel, n_subsets, subset_size, max_iter, lr, noise_init, noise_min, max_time,
                         normalize_y, input_scaling, validation_fraction, seed, device, verbose)

"""Deep Basis Kernel GP (Zhu, Yuchi & Xie 2025): k(x, x') = φ(x)ᵀφ(x'), φ a network with r outputs.

Exact inference (eq. 5/6) costs O(n r²); SVI (eqs. 8–10) trains on mini-batches in weight space.
The variance correction (§3.5) adds the trace regulariser (eq. 11) in training and the diagonal
c(x, x) = max_j ‖φ(x_j)‖² − ‖φ(x)‖² at prediction (eq. 12).

``normalize_features`` (default: on whenever the correction is on and r ≥ 2) makes every feature
vector have the same learned norm, φ = s·g/‖g‖, so the prior variance is uniform by construction
and both correction terms are zero up to rounding; docs/benchmarks.md has the measurements that
made this the default. ``normalize_features=False`` is the paper's procedure, verbatim.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from neuralgp.chunking import EXACT_TRAIN_ROWS, map_rows, row_slices
from neuralgp.features import ConstantNorm, build_backbone
from neuralgp.io import register
from neuralgp.metrics import mean_z2, nll
from neuralgp.datasets.scaling import Scaler
from neuralgp.features.networks import ACTIVATIONS, BACKBONES
from neuralgp.models.base import NeuralGPRegressor
from neuralgp.params import (BOOL, COMMON_RULES, NON_NEGATIVE, NONE, POSITIVE, POSITIVE_INT, VALIDATION_FRACTION,
                             one_of)
from neuralgp.posterior import (PRECISIONS, ExactPosterior, GaussianLikelihood, accumulate_stats, elbo,
                                make_weight_posterior)
from neuralgp.posterior.correction import correction_scale, trace_penalty
from neuralgp.posterior.objectives import chunked_exact_backward, exact_objective
from neuralgp.posterior.positive import Positive
from neuralgp.posterior.variational import FAMILIES
from neuralgp.train import adam, minibatch_epoch, train


class DBKModule(nn.Module):
    """Feature network, noise σ² (``noise()``, above ``noise_min``) and, for SVI, q(w)."""

    def __init__(self, net: nn.Module, rank: int, noise_init: float, noise_min: float, svi: bool, family: str):
        super().__init__()
        self.net = net
        self.noise = Positive(noise_init, floor=noise_min, names=("noise_init", "noise_min"))
        self.q = make_weight_posterior(family, rank) if svi else None

    def forward(self, x):
        return self.net(x)


@register
class DBKRegressor(NeuralGPRegressor):
    """Deep basis kernel GP regressor with exact (``inference="exact"``) or SVI (``"svi"``, SVDBK) inference.

    Ablations of the paper: ``variance_correction=False`` (-c), ``rank=1`` (-r), both (-cr).
    """

    param_rules = {
        "rank": POSITIVE_INT, "backbone": one_of(*BACKBONES), "hidden": POSITIVE_INT, "depth": POSITIVE_INT,
        "activation": one_of(*ACTIVATIONS), "inference": one_of("exact", "svi"), "variance_correction": BOOL,
        "normalize_features": (one_of("auto"), BOOL), "variational_family": one_of(*FAMILIES),
        "training_gram_precision": one_of(*PRECISIONS), "chunk_size": (NONE, POSITIVE_INT), "lr": POSITIVE,
        "weight_decay": NON_NEGATIVE, "batch_size": POSITIVE_INT, "max_iter": POSITIVE_INT,
        "max_epochs": POSITIVE_INT, "eval_every": (NONE, POSITIVE_INT), "patience": (NONE, POSITIVE_INT),
        "noise_init": POSITIVE, "noise_lr": (NONE, POSITIVE), "noise_min": NON_NEGATIVE, "normalize_y": BOOL,
        "input_scaling": one_of(*Scaler.KINDS), "validation_fraction": VALIDATION_FRACTION, "recalibration": BOOL,
        **COMMON_RULES}

    def __init__(self, rank=128, backbone="resnet", hidden=128, depth=2, activation="tanh", inference="exact",
                 variance_correction=True, normalize_features="auto", variational_family="full",
                 training_gram_precision="mixed", chunk_size=EXACT_TRAIN_ROWS, lr=1e-3,
                 weight_decay=1e-4, batch_size=256, max_iter=10000, max_epochs=2000, eval_every=None,
                 patience=None, max_time=None, noise_init=0.1, noise_lr=None, noise_min=1e-6, normalize_y=True,
                 input_scaling="minmax", validation_fraction=0.1, recalibration=True, seed=0, device="cpu",
                 verbose=True):
        self.rank = rank
        self.backbone = backbone
        self.hidden = hidden
        self.depth = depth
        self.activation = activation
        self.inference = inference
        self.variance_correction = variance_correction
        self.normalize_features = normalize_features
        self.variational_family = variational_family
        self.training_gram_precision = training_gram_precision
        self.chunk_size = chunk_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.max_epochs = max_epochs
        self.eval_every = eval_every
        self.patience = patience
        self.max_time = max_time
        self.noise_init = noise_init
        self.noise_lr = noise_lr
        self.noise_min = noise_min
        self.normalize_y = normalize_y
        self.input_scaling = input_scaling
        self.validation_fraction = validation_fraction
        self.recalibration = recalibration
        self.seed = seed
        self.device = device
        self.verbose = verbose

    # -- construction ----------------------------------------------------------------------------
    def uses_normalized_features(self) -> bool:
        if self.normalize_features == "auto":
            return bool(self.variance_correction) and self.rank >= 2
        return bool(self.normalize_features)

    def trains_trace_regulariser(self) -> bool:
        """The trace term is trained only for free features: with constant-norm features it is zero."""
        return bool(self.variance_correction) and not self.uses_normalized_features()

    def recalibrates_on_validation(self) -> bool:
        return bool(self.recalibration)

    def _gram_precision(self) -> str:
        if self.training_gram_precision not in PRECISIONS:
            raise ValueError(f"training_gram_precision must be one of {PRECISIONS}, "
                             f"got {self.training_gram_precision!r}")
        return self.training_gram_precision

    def build_module(self, in_dim: int) -> DBKModule:
        """A fresh (untrained) DBKModule for inputs of dimension ``in_dim``."""
        if self.inference not in ("exact", "svi"):
            raise ValueError(f"inference must be 'exact' or 'svi', got {self.inference!r}")
        if int(self.rank) < 1:
            raise ValueError(f"rank must be >= 1, got {self.rank}")
        net = build_backbone(self.backbone, in_dim, self.rank, self.hidden, self.depth, self.activation)
        if self.uses_normalized_features():
            net = ConstantNorm(net)
        return DBKModule(net, self.rank, self.noise_init, self.noise_min, self.inference == "svi",
                         self.variational_family).to(self.device)

    # -- fitting ---------------------------------------------------------------------------------
    def _fit_scaled(self, X, y, X_val, y_val):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.module_ = self.build_module(X.shape[1])
            Xt, yt = self._tensor(X, device=self.device), self._tensor(y, torch.float64, self.device)
            val = None
            if X_val is not None:
                val = (self._tensor(X_val, device=self.device), y_val)
            fit = self._fit_exact if self.inference == "exact" else self._fit_svi
            self.train_log_ = fit(Xt, yt, val)
        self._cache_posterior(Xt, yt)
        self.n_iter_ = self.train_log_.steps
        return self

    def _optimizer(self):
        return adam(self.module_, self.module_.net, self.lr, self.weight_decay,
                    {"noise": self.noise_lr} if self.noise_lr else None)

    def _validation_nll(self, val, predict_scaled) -> float:
        """Validation NLL of the current state; with ``recalibration`` the NLL after the variance scaling that
        ``fit`` will apply (α = mean z² on the same points), so early stopping selects what is returned."""
        X_val, y_val = val
        with torch.no_grad():  # in chunks: the validation set of a 10⁷-point problem has 10⁶ rows
            parts = [predict_scaled(X_val[rows]) for rows in row_slices(len(X_val))]
        mean, var_y = torch.cat([p[0] for p in parts]).cpu().numpy(), torch.cat([p[2] for p in parts]).cpu().numpy()
        std = np.sqrt(var_y)
        if self.recalibration:
            std = std * np.sqrt(mean_z2(y_val, mean, std))
        return nll(y_val, mean, std)

    def _fit_exact(self, Xt, yt, val):
        m, n, opt, precision = self.module_, len(yt), self._optimizer(), self._gram_precision()

        chunked = self.chunk_size is not None and n > self.chunk_size

        def step():
            opt.zero_grad(set_to_none=True)
            if chunked:  # same gradient, O(chunk·r) memory, one extra forward pass
                loss = chunked_exact_backward(m, Xt, yt, self.trains_trace_regulariser(), self.chunk_size, precision)
            else:
                loss = -exact_objective(m, Xt, yt, self.trains_trace_regulariser(), precision) / n
                loss.backward()
                loss = loss.item()
            opt.step()
            return loss

        validate = None
        if val is not None:
            def validate():
                posterior, max_var = self._exact_posterior(Xt, yt)
                return self._validation_nll(val, lambda X: self._predict_torch(X, posterior, max_var))
        return train(m, step, self.max_iter, validate, eval_every=self.eval_every or 25,
                     patience=self.patience or 2000, verbose=self.verbose, desc="DBK exact", unit="it",
                     max_seconds=self.max_time)

    def _fit_svi(self, Xt, yt, val):
        m, n, opt = self.module_, len(yt), self._optimizer()
        gen = torch.Generator().manual_seed(self.seed)

        def batch_loss(idx):
            phi = m(Xt[idx])
            noise = m.noise()
            objective = elbo(phi, yt[idx], m.q, GaussianLikelihood(noise), n_total=n)
            if self.trains_trace_regulariser():
                objective = objective - (n / len(idx)) * trace_penalty(phi, noise)
            return -objective / n

        def epoch():  # a batch of one has no trace term: skip it (it joins the next permutation)
            return minibatch_epoch(batch_loss, n, int(self.batch_size), gen, opt, min_batch=min(2, n))

        validate = None
        if val is not None:
            def validate():
                max_var = self._max_prior_variance(Xt)
                return self._validation_nll(val, lambda X: self._predict_torch(X, m.q, max_var))
        return train(m, epoch, self.max_epochs, validate, eval_every=self.eval_every or 10,
                     patience=self.patience or 200, verbose=self.verbose, desc="DBK svi", unit="epoch",
                     max_seconds=self.max_time)

    # -- posterior ---------------------------------------------------------------------------------
    def _max_prior_variance(self, Xt) -> torch.Tensor | None:
        """M_X = max_j ‖φ(x_j)‖² over the whole training set (None without correction)."""
        if not self.variance_correction:
            return None
        with torch.no_grad():
            return map_rows(lambda X: (self.module_(X).double() ** 2).sum(-1).max().reshape(1), Xt).max()

    def _exact_posterior(self, Xt, yt):
        m = self.module_
        with torch.no_grad():
            noise = m.noise().detach()
            max_var = self._max_prior_variance(Xt)
            scale_fn = None if max_var is None else (lambda phi: correction_scale(phi, noise, max_var))
            stats = accumulate_stats(m, Xt, yt, scale_fn)
            return ExactPosterior(stats, noise), max_var

    def _cache_posterior(self, Xt, yt):
        self.module_.eval()
        if self.inference == "exact":
            self.posterior_, self.max_prior_variance_scaled_ = self._exact_posterior(Xt, yt)
        else:
            self.posterior_, self.max_prior_variance_scaled_ = self.module_.q, self._max_prior_variance(Xt)

    def _predict_torch(self, Xt, posterior, max_var):
        """(mean, var_f, var_y) on the scaled target, as float64 tensors."""
        with torch.no_grad():
            phi = self.module_(Xt)
            noise = self.module_.noise().detach()
            mean, var_f = posterior.predict_f(phi)
            scale = None if max_var is None else correction_scale(phi, noise, max_var)
            _, var_y = GaussianLikelihood(noise.double(), scale).predictive(mean.double(), var_f.double())
        return mean.double(), var_f.double(), var_y

    def _predict_scaled(self, X):
        out = self._predict_torch(self._tensor(X, device=self.device), self.posterior_,
                                  self.max_prior_variance_scaled_)
        return tuple(t.cpu().numpy() for t in out)

    # -- fitted quantities in the user's units -----------------------------------------------------
    def features(self, X) -> np.ndarray:
        """Φ for raw X, in the units of y: predictions are the GP with k(x, x') = features(x)·features(x')
        (including any ``recalibrate`` factor)."""
        Xt = self._tensor(self._scaled_inputs(X), device=self.device)
        with torch.no_grad():
            phi = map_rows(self.module_, Xt)
        return phi.double().cpu().numpy() * self._y_scale * math.sqrt(self.variance_scale)

    @property
    def noise_variance_(self) -> float:
        """Fitted σ² in the units of y²."""
        self._check_fitted()
        return float(self.module_.noise().detach()) * self._y_scale ** 2 * self.variance_scale

    @property
    def max_prior_variance_(self) -> float | None:
        """M_X = max training ‖φ‖² in units of y² (the corrected prior variance); None without correction."""
        self._check_fitted()
        v = self.max_prior_variance_scaled_
        return None if v is None else float(v) * self._y_scale ** 2 * self.variance_scale

    # -- persistence -------------------------------------------------------------------------------
    def _fitted_state(self) -> dict:
        state = {"module": {k: v.cpu() for k, v in self.module_.state_dict().items()},
                 "max_prior_variance": None if self.max_prior_variance_scaled_ is None
                 else self.max_prior_variance_scaled_.cpu(), "n_iter": self.n_iter_}
        if self.inference == "exact":
            state["chol"], state["weights_mean"] = self.posterior_.chol.cpu(), self.posterior_.weights_mean.cpu()
        return state

    def _restore(self, state: dict):
        self.module_ = self.build_module(self.n_features_in_)
        self.module_.load_state_dict(state["module"])
        self.module_.eval()
        self.n_iter_ = state["n_iter"]
        mv = state["max_prior_variance"]
        self.max_prior_variance_scaled_ = None if mv is None else torch.as_tensor(mv, dtype=torch.float64,
                                                                                  device=self.device)
        if self.inference == "exact":
            self.posterior_ = ExactPosterior.from_factor(state["chol"].to(self.device),
                                                         state["weights_mean"].to(self.device),
                                                         self.module_.noise().detach())
        else:
            self.posterior_ = self.module_.q

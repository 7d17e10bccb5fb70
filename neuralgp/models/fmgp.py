"""FM-GP (Stephenson): exact GPs on a learned neural feature map, k(x, x') = σ_f² ψ(x)ᵀψ(x') + σ²δ.

Training maximises the exact marginal likelihood summed over a few random disjoint subsets of the
training set (default 4 × ≤ 20 000 points, 200 Adam steps, §3.5 of the spec); prediction then uses the
statistics ΨᵀΨ, Ψᵀy of the whole training set (eqs. 3–4), accumulated in chunks in float64.
Regression variances are recalibrated on held-out data (Algorithm 1); classification runs C regressions
on Dirichlet-transformed labels sharing ψ (appendix 8.3) and calibrates a softmax temperature.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from neuralgp import distributed
from neuralgp.chunking import map_rows
from neuralgp.datasets.scaling import Scaler
from neuralgp.errors import InputError
from neuralgp.features import MLP, ConstantNorm, ProductFeatures, SumFeatures
from neuralgp.features.networks import ACTIVATIONS, NORMS
from neuralgp.io import register
from neuralgp.models.base import NeuralGPClassifier, NeuralGPRegressor
from neuralgp.models.calibration import softmax_samples
from neuralgp.params import (BOOL, CHECKPOINT_RULES, COMMON_RULES, NON_NEGATIVE, NONE, POSITIVE, POSITIVE_INT,
                             PREDICTIVE, RECALIBRATION, VALIDATION_FRACTION, int_tuple, one_of)
from neuralgp.posterior import ExactPosterior, accumulate_stats, gram_stats, stream_stats
from neuralgp.posterior.dirichlet import ALPHA_EPS, class_gram, dirichlet_stats, dirichlet_targets
from neuralgp.posterior.positive import Positive
from neuralgp.train import adam, train, training_subsets

FEATURE_MAP_RULES = {  # the ψ network and its training, shared by the regressor and the classifier
    "feature_dim": POSITIVE_INT, "hidden": POSITIVE_INT, "depth": POSITIVE_INT, "activation": one_of(*ACTIVATIONS),
    "norm": (NONE, one_of(*NORMS)), "product": (NONE, int_tuple(2)), "additive": (NONE, int_tuple(2)),
    "unit_norm": BOOL, "n_subsets": POSITIVE_INT, "subset_size": POSITIVE_INT, "max_iter": POSITIVE_INT,
    "lr": POSITIVE, "weight_decay": NON_NEGATIVE, "outputscale_init": POSITIVE, "noise_min": NON_NEGATIVE,
    "input_scaling": one_of(*Scaler.KINDS), **CHECKPOINT_RULES, **COMMON_RULES}


class FMGPModule(nn.Module):
    """ψ network, noise σ² (above ``noise_min``) and output scale σ_f², one of each per output (class)."""

    def __init__(self, net: nn.Module, n_outputs: int, noise_init: float, outputscale_init: float, noise_min: float):
        super().__init__()
        self.net = net
        shape = () if n_outputs == 1 else (n_outputs,)
        self.noise = Positive(noise_init, floor=noise_min, shape=shape, names=("noise_init", "noise_min"))
        self.outputscale = Positive(outputscale_init, shape=shape)
        self.class_mean = nn.Parameter(torch.zeros(n_outputs)) if n_outputs > 1 else None

    def forward(self, x):
        return self.net(x)


def build_feature_map(in_dim: int, feature_dim: int, hidden: int, depth: int, activation: str, norm, product,
                      additive, unit_norm: bool) -> tuple[nn.Module, int]:
    """MLP_p, or MLP_p₁ × MLP_p₂ (``product=(p₁, p₂)``, the Hadamard product of the two kernels), or
    [MLP_p₁, MLP_p₂, …] (``additive=(p₁, p₂, …)``, the sum of the kernels); optionally ψ/‖ψ‖. Returns (map, rank)."""
    def mlp(p):
        return MLP(in_dim, int(p), hidden=hidden, depth=depth, activation=activation, norm=norm)
    if product is not None and additive is not None:
        raise ValueError("give product or additive, not both")
    if product is not None:
        p1, p2 = (int(v) for v in product)
        net, rank = ProductFeatures(mlp(p1), mlp(p2)), p1 * p2
    elif additive is not None:
        net, rank = SumFeatures(*(mlp(p) for p in additive)), sum(int(p) for p in additive)
    else:
        net, rank = mlp(int(feature_dim)), int(feature_dim)
    if unit_norm:
        net = ConstantNorm(net, learn_scale=False)
    return net, rank


class _FMGPMixin:
    """What the regressor and the classifier share: the feature map, the subset training loop."""

    def _new_module(self, in_dim: int, n_outputs: int, noise_init: float) -> FMGPModule:
        net, self.rank_ = build_feature_map(in_dim, self.feature_dim, self.hidden, self.depth, self.activation,
                                            self.norm, self.product, self.additive, self.unit_norm)
        return FMGPModule(net, n_outputs, noise_init, self.outputscale_init, self.noise_min).to(self.device)

    def _train_on_subsets(self, Xt, targets: torch.Tensor, subset_lml) -> None:
        """Adam on −Σ_s log p(y_s)/Σ|s| over the subsets (the paper's decoupled hyper-parameter training).

        In a process group the ``n_subsets`` subsets are dealt to the workers (worker r holds subsets r, r + W, …,
        drawn from its own rows with seed (seed, r)), and every gradient is summed over workers: the same objective
        on subsets spread over the machines."""
        m = self.module_
        rank, size = distributed.world()
        if self.n_subsets < size:
            raise InputError(f"n_subsets={self.n_subsets} gives some of the {size} workers no training subset; "
                             f"use n_subsets >= {size}")
        local = len(range(rank, self.n_subsets, size))
        seed = self.seed if size == 1 else [self.seed, rank]
        subsets = training_subsets(len(targets), local, self.subset_size, seed)
        idx = torch.as_tensor(np.concatenate(subsets), device=self.device)
        bounds = np.cumsum([0] + [len(s) for s in subsets])
        X_sub, count = Xt[idx], distributed.total_count(len(idx))
        opt = adam(m, m.net, self.lr, self.weight_decay)  # weight decay on the network's weights only
        m.train()

        def step():
            opt.zero_grad(set_to_none=True)
            psi = m(X_sub)
            lml = sum(subset_lml(psi[a:b], idx[a:b]) for a, b in zip(bounds[:-1], bounds[1:]))
            loss = -lml / count
            loss.backward()
            distributed.sum_gradients(m.parameters())  # each worker's subsets are its share of the objective
            opt.step()
            return float(distributed.total(loss.detach()))

        self.train_log_ = train(m, step, self.max_iter, None, eval_every=max(1, self.max_iter // 20),
                                verbose=self.verbose, desc=type(self).__name__, unit="it",
                                max_seconds=self.max_time, checkpoint=self._checkpoint(opt, Xt, targets))
        self.n_iter_ = self.train_log_.steps
        self.training_subset_sizes_ = [len(s) for s in subsets]
        m.eval()

    def _fitted_state(self) -> dict:
        return {"module": {k: v.cpu() for k, v in self.module_.state_dict().items()}, "n_iter": self.n_iter_,
                "chol": self.posterior_.chol.cpu(), "weights_mean": self.posterior_.weights_mean.cpu()}

    def _restore_module(self, state: dict, n_outputs: int):
        """The network and σ's from ``state`` (initial values are overwritten), the posterior from its cached factor."""
        self.module_ = m = self._new_module(self.n_features_in_, n_outputs, self.noise_min + 1.0)
        m.load_state_dict(state["module"])
        m.eval()
        self.n_iter_ = state["n_iter"]
        self.posterior_ = ExactPosterior.from_factor(state["chol"].to(self.device), state["weights_mean"].to(self.device),
                                                     m.noise().detach(), m.outputscale().detach())

    def _features_scaled(self, Xt) -> torch.Tensor:
        with torch.no_grad():
            return map_rows(self.module_, Xt)


@register
class FMGPRegressor(_FMGPMixin, NeuralGPRegressor):
    """FM-GP regression. ``fit(X, y, X_cal, y_cal)`` recalibrates on (X_cal, y_cal) when given.

    Defaults are the paper's (MLP 2 × 512, ReLU, LayerNorm, p = 64, 4 subsets of ≤ 20 000, 200 Adam steps);
    the learning rate is not in the paper: 1e-2 was chosen on parkinsons and protein (docs/benchmarks.md).
    ``product=(8, 8)`` uses MLP_8 × MLP_8 features (p = 64), ``additive=(32, 32)`` the sum of two MLP_32
    kernels; ``unit_norm`` the weak-stationarity ψ/‖ψ‖; ``norm="batch"`` BatchNorm instead of LayerNorm.
    ``predictive="student_t"`` (the default since 2026-11-28, beyond the paper): the recalibrated mean and variance
    with a Student-t shape fitted to the calibration z-scores — the same fits calibrated on the same sets, NLL lower
    on 18 of 21 small sets and all 11 large ones (docs/methods/dbk.md, "A Student-t predictive"); "gaussian": the
    paper's N. ``predict_interval`` gives the predictive's own intervals.
    ``recalibration`` as DBK's (beyond the paper, since 2026-11-30): True cross-fits α where the calibration part
    has fewer than ``CROSS_FIT_BELOW`` rows (5 refits of the same 200 steps, docs/methods/fmgp.md), "validation"
    is Algorithm 1 on the calibration part alone, False none.
    """

    param_rules = {**FEATURE_MAP_RULES, "noise_init": POSITIVE, "normalize_y": BOOL,
                   "validation_fraction": VALIDATION_FRACTION, "recalibration": RECALIBRATION,
                   "predictive": PREDICTIVE}

    def __init__(self, feature_dim=64, hidden=512, depth=2, activation="relu", norm="layer", product=None,
                 additive=None, unit_norm=False, n_subsets=4, subset_size=20000, max_iter=200, lr=1e-2, weight_decay=0.0,
                 noise_init=0.1, outputscale_init=1.0, noise_min=1e-6, max_time=None, normalize_y=True,
                 input_scaling="standard", validation_fraction=0.1, recalibration=True, predictive="student_t", seed=0,
                 device="cpu", verbose=True, checkpoint=None, checkpoint_every=100):
        self.feature_dim = feature_dim
        self.hidden = hidden
        self.depth = depth
        self.activation = activation
        self.norm = norm
        self.product = product
        self.additive = additive
        self.unit_norm = unit_norm
        self.n_subsets = n_subsets
        self.subset_size = subset_size
        self.max_iter = max_iter
        self.lr = lr
        self.weight_decay = weight_decay
        self.noise_init = noise_init
        self.outputscale_init = outputscale_init
        self.noise_min = noise_min
        self.max_time = max_time
        self.normalize_y = normalize_y
        self.input_scaling = input_scaling
        self.validation_fraction = validation_fraction
        self.recalibration = recalibration
        self.predictive = predictive
        self.seed = seed
        self.device = device
        self.verbose = verbose
        self.checkpoint = checkpoint
        self.checkpoint_every = checkpoint_every

    def fit(self, X, y, X_cal=None, y_cal=None):
        """Train on (X, y), cache its posterior, then recalibrate on (X_cal, y_cal) — or, when none is given,
        on a random ``validation_fraction`` of (X, y) held out from training (0 trains on all of it, uncalibrated);
        a calibration part under ``CROSS_FIT_BELOW`` rows is cross-fitted (``NeuralGPRegressor.fit``)."""
        return NeuralGPRegressor.fit(self, X, y, X_cal, y_cal)

    validation_names = ("X_cal", "y_cal")

    def supports_distributed(self) -> bool:
        """Subsets dealt to the workers with gradients summed; the posterior's statistics summed over all rows."""
        return True

    def recalibrates_on_validation(self) -> bool:
        return bool(self.recalibration)

    def _refit_budget(self, trained_rows, rows):
        """The Adam steps this fit ran: its fixed budget, or fewer where ``max_time`` stopped it."""
        return {"max_iter": max(1, self.n_iter_)}

    def _fit_scaled(self, X, y, X_val, y_val):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.module_ = self._new_module(X.shape[1], 1, self.noise_init)
            Xt, yt = self._tensor(X, device=self.device), self._tensor(y, torch.float64, self.device)
            m = self.module_

            def subset_lml(psi, idx):
                return ExactPosterior(gram_stats(psi, yt[idx]), m.noise(), m.outputscale()).log_marginal_likelihood()

            self._train_on_subsets(Xt, yt, subset_lml)
        self._condition(self._in_memory(Xt, yt))
        return self

    def conditions_on_rows(self) -> bool:
        return True

    def _condition(self, chunks):
        m = self.module_
        with torch.no_grad():
            stats = distributed.reduce_stats(stream_stats(m, chunks()))
            self.posterior_ = ExactPosterior(stats, m.noise().detach(), m.outputscale().detach())

    def _predict_scaled(self, X):
        psi = self._features_scaled(self._tensor(X, device=self.device))
        mean, var_f, var_y = self.posterior_.predict(psi)
        return mean.cpu().numpy(), var_f.cpu().numpy(), var_y.cpu().numpy()

    # -- fitted quantities in the user's units -----------------------------------------------------
    def features(self, X) -> np.ndarray:
        """ψ(X) (unitless): predictions are the GP with k = outputscale_ · ψᵀψ' + noise_variance_ · δ."""
        return self._features_scaled(self._tensor(self._scaled_inputs(X), device=self.device)).double().cpu().numpy()

    @property
    def outputscale_(self) -> float:
        """σ_f² in units of y² (recalibration included)."""
        self._check_fitted()
        return float(self.posterior_.outputscale) * self._y_scale ** 2 * self.variance_scale

    @property
    def noise_variance_(self) -> float:
        """σ² in units of y² (recalibration included)."""
        self._check_fitted()
        return float(self.posterior_.noise) * self._y_scale ** 2 * self.variance_scale

    def _restore(self, state: dict):
        self._restore_module(state, n_outputs=1)


@register
class FMGPClassifier(_FMGPMixin, NeuralGPClassifier):
    """FM-GP classification: Dirichlet-transformed labels (α_ε = 0.01), C regressions sharing ψ and ΨᵀΨ.

    Per class c a constant mean m_c, σ_f,c² and a noise factor σ_c² (the noise of point i is σ_c² s_ic with the
    Dirichlet noise s_ic, ``heteroscedastic=True``, the default; or σ_c² alone with ``False``). Probabilities
    are E[softmax(f/T)] by Monte Carlo over the latent posterior; T is fitted on (X_cal, y_cal) when given.
    """

    param_rules = {**FEATURE_MAP_RULES, "heteroscedastic": BOOL, "alpha_eps": POSITIVE, "n_samples": POSITIVE_INT}

    def __init__(self, feature_dim=64, hidden=512, depth=2, activation="relu", norm="layer", product=None,
                 additive=None, unit_norm=False, heteroscedastic=True, alpha_eps=ALPHA_EPS, n_samples=256, n_subsets=4,
                 subset_size=20000, max_iter=200, lr=1e-2, weight_decay=0.0, outputscale_init=1.0,
                 noise_min=1e-6, max_time=None, input_scaling="standard", seed=0, device="cpu", verbose=True,
                 checkpoint=None, checkpoint_every=100):
        self.feature_dim = feature_dim
        self.hidden = hidden
        self.depth = depth
        self.activation = activation
        self.norm = norm
        self.product = product
        self.additive = additive
        self.unit_norm = unit_norm
        self.heteroscedastic = heteroscedastic
        self.alpha_eps = alpha_eps
        self.n_samples = n_samples
        self.n_subsets = n_subsets
        self.subset_size = subset_size
        self.max_iter = max_iter
        self.lr = lr
        self.weight_decay = weight_decay
        self.outputscale_init = outputscale_init
        self.noise_min = noise_min
        self.max_time = max_time
        self.input_scaling = input_scaling
        self.seed = seed
        self.device = device
        self.verbose = verbose
        self.checkpoint = checkpoint
        self.checkpoint_every = checkpoint_every

    def _fit_scaled(self, X, labels, C):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.module_ = self._new_module(X.shape[1], C, 1.0 if self.heteroscedastic else 0.5)
            m = self.module_
            t = dirichlet_targets(self.alpha_eps)
            share = np.bincount(labels, minlength=C) / len(labels)
            with torch.no_grad():  # start each class mean at the mean of its transformed targets
                m.class_mean.copy_(torch.as_tensor(t["y_out"] + share * (t["y_in"] - t["y_out"])))
            Xt, lt = self._tensor(X), torch.as_tensor(labels, device=self.device)

            def subset_lml(psi, idx):
                return self._posterior(class_gram(psi, lt[idx], C)).log_marginal_likelihood().sum()

            self._train_on_subsets(Xt, lt, subset_lml)
            with torch.no_grad():  # full-data statistics, chunk by chunk: O(chunk · width) memory
                per_class = accumulate_stats(self._features_scaled, Xt, lt,
                                             stats_fn=lambda psi, labels_c: class_gram(psi, labels_c, C))
                self.posterior_ = self._posterior(per_class)

    def _posterior(self, per_class) -> ExactPosterior:
        m = self.module_
        stats = dirichlet_stats(per_class, m.class_mean, self.heteroscedastic, self.alpha_eps)
        return ExactPosterior(stats, m.noise(), m.outputscale())

    def predict_latent(self, X) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance (n, C) of the latent log-Gamma regressions f_c(x) (before the softmax)."""
        mean, var_f = self._latent(self._scaled(X))
        return mean.cpu().numpy(), var_f.cpu().numpy()

    def _latent(self, Xs):
        psi = self._features_scaled(self._tensor(Xs))
        mean, var_f = self.posterior_.predict_f(psi)  # (C, m)
        return (mean + self.module_.class_mean.detach().double()[:, None]).T, var_f.T

    def _latent_samples(self, Xs) -> torch.Tensor:
        mean, var_f = self._latent(Xs)
        return softmax_samples(mean.double(), var_f.double(), self.n_samples, self.seed)

    def _restore(self, state: dict):
        self._restore_module(state, n_outputs=len(self.classes_))

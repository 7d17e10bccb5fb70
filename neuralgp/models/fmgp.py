"""FM-GP (Stephenson): exact GPs on a learned neural feature map, k(x, x') = σ_f² ψ(x)ᵀψ(x') + σ²δ.

Training maximises the exact marginal likelihood summed over a few random disjoint subsets of the
training set (default 4 × ≤ 20 000 points, 200 Adam steps, §3.5 of the spec); prediction then uses the
statistics ΨᵀΨ, Ψᵀy of the whole training set (eqs. 3–4), accumulated in chunks in float64.
Regression variances are recalibrated on held-out data (Algorithm 1); classification runs C regressions
on Dirichlet-transformed labels sharing ψ (appendix 8.3) and calibrates a softmax temperature.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.optimize import minimize_scalar
from sklearn.base import BaseEstimator, ClassifierMixin
from torch import nn
from torch.nn.functional import softplus

from neuralgp.datasets.scaling import Scaler
from neuralgp.errors import InputError, NotFittedError, check_labels, check_X
from neuralgp.features import MLP, ConstantNorm, ProductFeatures
from neuralgp.io import register, save_model
from neuralgp.models.base import NeuralGPRegressor
from neuralgp.posterior import ExactPosterior, accumulate_stats, gram_stats
from neuralgp.posterior.dirichlet import ALPHA_EPS, class_gram, dirichlet_stats, dirichlet_targets
from neuralgp.posterior.variational import inverse_softplus
from neuralgp.train import train, training_subsets

CHUNK = 65536


class FMGPModule(nn.Module):
    """ψ network, σ² = noise_min + softplus(raw) and σ_f² = softplus(raw), one of each per output (class)."""

    def __init__(self, net: nn.Module, n_outputs: int, noise_init: float, outputscale_init: float, noise_min: float):
        super().__init__()
        if noise_init <= noise_min:
            raise ValueError(f"noise_init ({noise_init}) must exceed noise_min ({noise_min})")
        self.net = net
        self.noise_min = noise_min
        shape = () if n_outputs == 1 else (n_outputs,)
        self.raw_noise = nn.Parameter(torch.full(shape, inverse_softplus(noise_init - noise_min)))
        self.raw_outputscale = nn.Parameter(torch.full(shape, inverse_softplus(outputscale_init)))
        self.class_mean = nn.Parameter(torch.zeros(n_outputs)) if n_outputs > 1 else None

    def noise(self) -> torch.Tensor:
        return self.noise_min + softplus(self.raw_noise)

    def outputscale(self) -> torch.Tensor:
        return softplus(self.raw_outputscale)

    def forward(self, x):
        return self.net(x)


def build_feature_map(in_dim: int, n_features: int, hidden: int, depth: int, activation: str, norm, product,
                      unit_norm: bool) -> tuple[nn.Module, int]:
    """MLP_p (or MLP_p₁ × MLP_p₂ when ``product=(p₁, p₂)``), optionally ψ/‖ψ‖; returns (map, rank)."""
    def mlp(p):
        return MLP(in_dim, p, hidden=hidden, depth=depth, activation=activation, norm=norm)
    if product is not None:
        p1, p2 = (int(v) for v in product)
        net, rank = ProductFeatures(mlp(p1), mlp(p2)), p1 * p2
    else:
        net, rank = mlp(int(n_features)), int(n_features)
    if unit_norm:
        net = ConstantNorm(net, learn_scale=False)
    return net, rank


class _FMGPMixin:
    """What the regressor and the classifier share: the feature map, the subset training loop."""

    def _new_module(self, in_dim: int, n_outputs: int, noise_init: float) -> FMGPModule:
        net, self.rank_ = build_feature_map(in_dim, self.n_features, self.hidden, self.depth, self.activation,
                                            self.norm, self.product, self.unit_norm)
        return FMGPModule(net, n_outputs, noise_init, self.outputscale_init, self.noise_min).to(self.device)

    def _train_on_subsets(self, Xt, n_total: int, subset_lml) -> None:
        """Adam on −Σ_s log p(y_s)/Σ|s| over the subsets (the paper's decoupled hyper-parameter training)."""
        m = self.module_
        subsets = training_subsets(n_total, self.n_subsets, self.subset_size, self.seed)
        idx = torch.as_tensor(np.concatenate(subsets), device=self.device)
        bounds = np.cumsum([0] + [len(s) for s in subsets])
        X_sub = Xt[idx]
        opt = torch.optim.Adam(m.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        m.train()

        def step():
            opt.zero_grad(set_to_none=True)
            psi = m(X_sub)
            lml = sum(subset_lml(psi[a:b], idx[a:b]) for a, b in zip(bounds[:-1], bounds[1:]))
            loss = -lml / len(idx)
            loss.backward()
            opt.step()
            return loss.item()

        self.train_log_ = train(m, step, self.max_iter, None, eval_every=max(1, self.max_iter // 20),
                                verbose=self.verbose, desc=type(self).__name__, unit="it",
                                max_seconds=self.max_time)
        self.n_iter_ = self.train_log_.steps
        self.training_subset_sizes_ = [len(s) for s in subsets]
        m.eval()

    def _features_scaled(self, Xt) -> torch.Tensor:
        with torch.no_grad():
            return torch.cat([self.module_(Xt[i:i + CHUNK]) for i in range(0, len(Xt), CHUNK)])


@register
class FMGPRegressor(_FMGPMixin, NeuralGPRegressor):
    """FM-GP regression. ``fit(X, y, X_cal, y_cal)`` recalibrates on (X_cal, y_cal) when given.

    Defaults are the paper's (MLP 2 × 512, ReLU, LayerNorm, p = 64, 4 subsets of ≤ 20 000, 200 Adam steps);
    the learning rate is not in the paper: 1e-3 was chosen on the parkinsons set (docs/benchmarks.md).
    ``product=(8, 8)`` uses MLP_8 × MLP_8 features (p = 64); ``unit_norm`` the weak-stationarity ψ/‖ψ‖.
    """

    def __init__(self, n_features=64, hidden=512, depth=2, activation="relu", norm="layer", product=None,
                 unit_norm=False, n_subsets=4, subset_size=20000, max_iter=200, lr=1e-3, weight_decay=0.0,
                 noise_init=0.1, outputscale_init=1.0, noise_min=1e-6, max_time=None, normalize_y=True,
                 input_scaling="standard", seed=0, device="cpu", verbose=True):
        self.n_features = n_features
        self.hidden = hidden
        self.depth = depth
        self.activation = activation
        self.norm = norm
        self.product = product
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
        self.seed = seed
        self.device = device
        self.verbose = verbose

    def fit(self, X, y, X_cal=None, y_cal=None):
        """Train on (X, y), cache the full-data posterior, then ``recalibrate(X_cal, y_cal)`` if given."""
        if (X_cal is None) != (y_cal is None):
            raise InputError("give both X_cal and y_cal, or neither")
        if X_cal is not None:
            X_cal = check_X(X_cal, n_features=np.shape(X)[1] if np.ndim(X) == 2 else None, name="X_cal")
        super().fit(X, y)
        if X_cal is not None:
            self.recalibrate(X_cal, y_cal)
        return self

    def _fit_scaled(self, X, y, X_val, y_val):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.module_ = self._new_module(X.shape[1], 1, self.noise_init)
            Xt, yt = self._tensor(X, device=self.device), self._tensor(y, torch.float64, self.device)
            m = self.module_

            def subset_lml(psi, idx):
                return ExactPosterior(gram_stats(psi, yt[idx]), m.noise(), m.outputscale()).log_marginal_likelihood()

            self._train_on_subsets(Xt, len(yt), subset_lml)
        with torch.no_grad():
            stats = accumulate_stats(m, Xt, yt, chunk_size=CHUNK)
            self.posterior_ = ExactPosterior(stats, m.noise().detach(), m.outputscale().detach())
        return self

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

    # -- persistence -------------------------------------------------------------------------------
    def _fitted_state(self) -> dict:
        return {"module": {k: v.cpu() for k, v in self.module_.state_dict().items()}, "n_iter": self.n_iter_,
                "chol": self.posterior_.chol.cpu(), "weights_mean": self.posterior_.weights_mean.cpu()}

    def _restore(self, state: dict):
        self.module_ = self._new_module(self.n_features_in_, 1, self.noise_init)
        self.module_.load_state_dict(state["module"])
        self.module_.eval()
        self.n_iter_ = state["n_iter"]
        m = self.module_
        self.posterior_ = ExactPosterior.from_factor(state["chol"].to(self.device), state["weights_mean"].to(self.device),
                                                     m.noise().detach(), m.outputscale().detach())


def softmax_samples(mean: torch.Tensor, var_f: torch.Tensor, n_samples: int, seed: int) -> torch.Tensor:
    """Latent draws f ~ N(mean, var_f) per point and class, shape (S, m, C), with fixed random numbers."""
    gen = torch.Generator(device=mean.device).manual_seed(seed)
    eps = torch.randn((n_samples, *mean.shape), generator=gen, dtype=mean.dtype, device=mean.device)
    return mean + var_f.sqrt() * eps


def mc_softmax(f: torch.Tensor, temperature: float) -> torch.Tensor:
    """E[softmax(f/T)] over the sample axis: class probabilities (m, C)."""
    return torch.softmax(f / temperature, dim=-1).mean(0)


def fit_temperature(f: torch.Tensor, labels: np.ndarray, bounds=(0.05, 20.0)) -> float:
    """Temperature T minimising the NLL of ``mc_softmax(f, T)`` on labelled points (Guo et al. 2017)."""
    y = torch.as_tensor(labels, device=f.device)

    def nll(log_t):
        p = mc_softmax(f, math.exp(log_t))[torch.arange(len(y)), y]
        return float(-torch.log(p.clamp_min(1e-12)).mean())

    res = minimize_scalar(nll, bounds=tuple(math.log(b) for b in bounds), method="bounded")
    return math.exp(res.x)


@register
class FMGPClassifier(_FMGPMixin, ClassifierMixin, BaseEstimator):
    """FM-GP classification: Dirichlet-transformed labels (α_ε = 0.01), C regressions sharing ψ and ΨᵀΨ.

    Per class c a constant mean m_c, σ_f,c² and a noise factor σ_c² (the noise of point i is σ_c² s_ic with the
    Dirichlet noise s_ic, ``heteroscedastic=True``, the default; or σ_c² alone with ``False``). Probabilities
    are E[softmax(f/T)] by Monte Carlo over the latent posterior; T is fitted on (X_cal, y_cal) when given.
    """

    def __init__(self, n_features=64, hidden=512, depth=2, activation="relu", norm="layer", product=None,
                 unit_norm=False, heteroscedastic=True, alpha_eps=ALPHA_EPS, n_samples=256, n_subsets=4,
                 subset_size=20000, max_iter=200, lr=1e-3, weight_decay=0.0, outputscale_init=1.0,
                 noise_min=1e-6, max_time=None, input_scaling="standard", seed=0, device="cpu", verbose=True):
        self.n_features = n_features
        self.hidden = hidden
        self.depth = depth
        self.activation = activation
        self.norm = norm
        self.product = product
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

    # -- fitting -----------------------------------------------------------------------------------
    def fit(self, X, y, X_cal=None, y_cal=None):
        X, y = check_labels(X, y)
        if (X_cal is None) != (y_cal is None):
            raise InputError("give both X_cal and y_cal, or neither")
        classes = np.unique(y)
        if X_cal is not None:
            X_cal, y_cal = check_labels(X_cal, y_cal, "X_cal", "y_cal", min_classes=1, n_features=X.shape[1])
            unknown = np.setdiff1d(y_cal, classes)
            if len(unknown):
                raise InputError(f"y_cal has classes {unknown.tolist()} that are not in y")
        self.__dict__.pop("x_scaler_", None)
        x_scaler = Scaler(self.input_scaling).fit(X)
        labels = np.searchsorted(classes, y)
        C = len(classes)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            noise_init = 1.0 if self.heteroscedastic else 0.5
            self.module_ = self._new_module(X.shape[1], C, noise_init)
            m = self.module_
            counts = np.bincount(labels, minlength=C)
            t = dirichlet_targets(self.alpha_eps)
            with torch.no_grad():  # start each class mean at the mean of its transformed targets
                m.class_mean.copy_(torch.as_tensor(t["y_out"] + counts / len(labels) * (t["y_in"] - t["y_out"])))
            Xt = self._tensor(x_scaler.transform(X))
            lt = torch.as_tensor(labels, device=self.device)

            def subset_lml(psi, idx):
                stats = dirichlet_stats(class_gram(psi, lt[idx], C), m.class_mean, self.heteroscedastic, self.alpha_eps)
                return ExactPosterior(stats, m.noise(), m.outputscale()).log_marginal_likelihood().sum()

            self._train_on_subsets(Xt, len(labels), subset_lml)
            with torch.no_grad():
                psi = self._features_scaled(Xt)
                stats = dirichlet_stats(class_gram(psi, lt, C), m.class_mean, self.heteroscedastic, self.alpha_eps)
                self.posterior_ = ExactPosterior(stats, m.noise().detach(), m.outputscale().detach())
        self.classes_, self.n_features_in_, self.x_scaler_ = classes, X.shape[1], x_scaler
        self.temperature_ = 1.0
        if X_cal is not None:
            self.calibrate_temperature(X_cal, y_cal)
        return self

    def calibrate_temperature(self, X_cal, y_cal):
        """Fit the softmax temperature T on labelled held-out data by NLL (argmax, hence accuracy, unchanged)."""
        f = self._latent_samples(self._scaled(X_cal))
        self.temperature_ = fit_temperature(f, np.searchsorted(self.classes_, np.asarray(y_cal)))
        return self

    # -- prediction --------------------------------------------------------------------------------
    def _scaled(self, X) -> np.ndarray:
        if not hasattr(self, "x_scaler_"):
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit(X, y) first")
        return self.x_scaler_.transform(check_X(X, n_features=self.n_features_in_))

    def _latent_samples(self, Xs) -> torch.Tensor:
        psi = self._features_scaled(self._tensor(Xs))
        mean, var_f = self.posterior_.predict_f(psi)  # (C, m)
        mean = mean + self.module_.class_mean.detach().double()[:, None]
        return softmax_samples(mean.T.float(), var_f.T.float(), self.n_samples, self.seed)

    def predict_latent(self, X) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance (n, C) of the latent log-Gamma regressions f_c(x)."""
        psi = self._features_scaled(self._tensor(self._scaled(X)))
        mean, var_f = self.posterior_.predict_f(psi)
        mean = mean + self.module_.class_mean.detach().double()[:, None]
        return mean.T.cpu().numpy(), var_f.T.cpu().numpy()

    def predict_proba(self, X) -> np.ndarray:
        Xs = self._scaled(X)
        parts = [mc_softmax(self._latent_samples(Xs[i:i + 2048]), self.temperature_).double().cpu().numpy()
                 for i in range(0, len(Xs), 2048)]
        return np.concatenate(parts)

    def predict(self, X) -> np.ndarray:
        return self.classes_[self.predict_proba(X).argmax(1)]

    def _tensor(self, a) -> torch.Tensor:
        return torch.as_tensor(np.ascontiguousarray(a), dtype=torch.float32, device=self.device)

    # -- persistence -------------------------------------------------------------------------------
    def save(self, path):
        """Save everything needed to predict (not the training data) to ``path``."""
        self._scaled(np.zeros((1, getattr(self, "n_features_in_", 1))))  # fitted check
        m = self.module_
        payload = {"class": type(self).__name__, "params": self.get_params(deep=False),
                   "n_features_in": self.n_features_in_, "x_scaler": self.x_scaler_.state(),
                   "classes": torch.as_tensor(self.classes_), "temperature": self.temperature_,
                   "fitted": {"module": {k: v.cpu() for k, v in m.state_dict().items()}, "n_iter": self.n_iter_,
                              "chol": self.posterior_.chol.cpu(), "weights_mean": self.posterior_.weights_mean.cpu()}}
        return save_model(payload, path)

    @classmethod
    def _from_payload(cls, payload: dict):
        model = cls(**payload["params"])
        model.n_features_in_ = int(payload["n_features_in"])
        model.x_scaler_ = Scaler.from_state(payload["x_scaler"])
        model.classes_ = payload["classes"].numpy()
        model.temperature_ = float(payload["temperature"])
        state = payload["fitted"]
        model.module_ = model._new_module(model.n_features_in_, len(model.classes_), 1.0)
        model.module_.load_state_dict(state["module"])
        model.module_.eval()
        model.n_iter_ = state["n_iter"]
        m = model.module_
        model.posterior_ = ExactPosterior.from_factor(state["chol"], state["weights_mean"], m.noise().detach(),
                                                      m.outputscale().detach())
        return model

"""Deep additive kernel (DAK; Zhao, Chen et al. 2025): network → P projections → 1-D GPs on a fixed dyadic grid
(induced prior approximation, eqs. 7–10) → a Bayesian linear last layer over the P·M + 1 activations.

Inference over the last-layer weights w ~ N(0, I) (``features.AdditiveGridFeatures`` puts σ_p and the bias
into Φ, so the engine's posteriors apply unchanged):

- ``closed_form`` (DAK-CF): mean-field q(w), the closed-form expected log-likelihood (eq. 39) and KL (eq. 46),
  computed from Φ's at most P·L + 1 non-zeros per row (``features.InducedGrid.sparse``);
- ``mc`` (DAK-MC): the same bound with the expected log-likelihood from ``mc_samples`` reparameterised draws of w
  (eqs. 40–43);
- ``exact`` (beyond the paper): the exact Gaussian posterior over w, trained full batch by the log marginal
  likelihood as DBK is (O(n (PM)²)).

The mini-batch objective is (N/B) Σ_batch E_q[log p(y_i | f_i)] − KL(q ‖ p), divided by N (the ELBO per point;
the paper's code instead adds KL/B to a batch mean, spec §8). Predictions use the exact moments of f under q
(eq. 25) for both variational kinds — what the paper's 20-sample MC prediction estimates — plus the learned
noise σ².
"""

from __future__ import annotations

import torch
from torch import nn

from neuralgp.features import MLP, AdditiveGridFeatures, InducedGrid
from neuralgp.features.grid import KERNELS, MAX_LEVEL
from neuralgp.features.networks import ACTIVATIONS
from neuralgp.datasets.scaling import Scaler
from neuralgp.io import register
from neuralgp.models.weightspace import WeightSpaceModule, WeightSpaceRegressor
from neuralgp.params import (BOOL, COMMON_RULES, NON_NEGATIVE, NONE, POSITIVE, POSITIVE_INT, VALIDATION_FRACTION,
                             Rule, integer, int_tuple, one_of)
from neuralgp.posterior import GaussianLikelihood, elbo, mc_elbo
from neuralgp.train import adam, minibatch_epoch, train

INFERENCE = ("closed_form", "mc", "exact")
GRID_INTERVAL = (0.0, 1.0)
Q_INIT_STD = 0.05  # q(w) starts at m = 0, s = 0.05 (the paper's code: softplus(−3) ≈ 0.049), not at the prior
LEVEL = Rule(lambda v: integer(1).accepts(v) and v <= MAX_LEVEL, f"an integer in [1, {MAX_LEVEL}]")


@register
class DAKRegressor(WeightSpaceRegressor):
    """Deep additive kernel GP regressor (DAK-CF by default; ``inference="mc"`` DAK-MC, ``"exact"`` DAK-exact).

    ``n_projections`` P base GPs on a level-``grid_level`` grid (M = 2^L − 1 points on (0, 1)) with a
    ``kernel`` of fixed ``lengthscale``; the network D → ``hidden`` → ``embedding_dim`` (D_w) → P. The noise σ²
    is learned from ``noise_init`` (the paper fixes 0.01). ``finetune=True`` pre-trains the network by MSE for
    ``max_epochs``, freezes it and fits the last layer (σ_p, q, σ²) only (App. D).
    """

    name = "DAK"
    param_rules = {
        "n_projections": POSITIVE_INT, "grid_level": LEVEL, "lengthscale": POSITIVE, "kernel": one_of(*KERNELS),
        "inference": one_of(*INFERENCE), "hidden": int_tuple(0), "embedding_dim": POSITIVE_INT,
        "activation": one_of(*ACTIVATIONS), "mc_samples": POSITIVE_INT, "lr": POSITIVE, "weight_decay": NON_NEGATIVE,
        "batch_size": POSITIVE_INT, "max_epochs": POSITIVE_INT, "max_iter": POSITIVE_INT,
        "eval_every": (NONE, POSITIVE_INT), "patience": (NONE, POSITIVE_INT), "noise_init": POSITIVE,
        "noise_min": NON_NEGATIVE, "bias_std": POSITIVE, "finetune": BOOL, "normalize_y": BOOL,
        "input_scaling": one_of(*Scaler.KINDS), "validation_fraction": VALIDATION_FRACTION, "recalibration": BOOL,
        **COMMON_RULES}

    def __init__(self, n_projections=16, grid_level=3, lengthscale=1.0, kernel="laplace", inference="closed_form",
                 hidden=(64, 32), embedding_dim=64, activation="relu", mc_samples=8, lr=1e-3, weight_decay=5e-4,
                 batch_size=512, max_epochs=100, max_iter=2000, eval_every=None, patience=None, max_time=None,
                 noise_init=0.1, noise_min=1e-6, bias_std=1.0, finetune=False, normalize_y=True,
                 input_scaling="standard", validation_fraction=0.1, recalibration=True, seed=0, device="cpu",
                 verbose=True):
        self.n_projections = n_projections
        self.grid_level = grid_level
        self.lengthscale = lengthscale
        self.kernel = kernel
        self.inference = inference
        self.hidden = hidden
        self.embedding_dim = embedding_dim
        self.activation = activation
        self.mc_samples = mc_samples
        self.lr = lr
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.max_epochs = max_epochs
        self.max_iter = max_iter
        self.eval_every = eval_every
        self.patience = patience
        self.max_time = max_time
        self.noise_init = noise_init
        self.noise_min = noise_min
        self.bias_std = bias_std
        self.finetune = finetune
        self.normalize_y = normalize_y
        self.input_scaling = input_scaling
        self.validation_fraction = validation_fraction
        self.recalibration = recalibration
        self.seed = seed
        self.device = device
        self.verbose = verbose

    def _is_exact(self) -> bool:
        return self.inference == "exact"

    def grid(self) -> InducedGrid:
        return InducedGrid(self.grid_level, GRID_INTERVAL, self.kernel, self.lengthscale)

    def build_module(self, in_dim: int) -> WeightSpaceModule:
        """A fresh (untrained) module: the DAK feature map, σ², and q(w) (mean field) unless exact."""
        net = MLP(in_dim, self.embedding_dim, hidden=tuple(self.hidden), activation=self.activation)
        features = AdditiveGridFeatures(net, self.embedding_dim, self.n_projections, self.grid(), self.bias_std)
        q_init = {} if self._is_exact() else {"init_std": Q_INIT_STD}
        return WeightSpaceModule(features, features.n_columns, self.noise_init, self.noise_min,
                                 svi=not self._is_exact(), family="meanfield", **q_init).to(self.device)

    def _svi_objective(self, Xb, yb, n):
        m = self.module_
        phi, likelihood = m.net.sparse(Xb), GaussianLikelihood(m.noise())
        if self.inference == "mc":
            return mc_elbo(phi, yb, m.q, likelihood, int(self.mc_samples), n_total=n)
        return elbo(phi, yb, m.q, likelihood, n_total=n)

    def _prepare(self, Xt, yt):
        """``finetune``: pre-train network and projection with a linear head by MSE, then freeze them."""
        if not self.finetune:
            return
        features = self.module_.net
        head = nn.Linear(self.n_projections, 1).to(self.device)
        body = nn.Sequential(features.net, features.project)
        model = nn.Sequential(body, head)
        opt = adam(model, body, self.lr, self.weight_decay)
        gen = torch.Generator().manual_seed(self.seed)
        y32 = yt.float()

        def epoch():
            return minibatch_epoch(lambda idx: ((model(Xt[idx]).squeeze(-1) - y32[idx]) ** 2).mean(), len(yt),
                                   int(self.batch_size), gen, opt)

        train(model, epoch, self.max_epochs, None, eval_every=self.max_epochs, verbose=self.verbose,
              desc="DAK pre-training", unit="epoch", max_seconds=self.max_time)
        body.requires_grad_(False)

"""Deep additive kernel (DAK; Zhao, Chen et al. 2025): network → P projections → 1-D GPs on a fixed dyadic grid
(induced prior approximation, eqs. 7–10) → a Bayesian linear last layer over the P·M + 1 activations.

Inference over the last-layer weights w ~ N(0, I) (``features.AdditiveGridFeatures`` puts σ_p and the bias
into Φ, so the engine's posteriors apply unchanged):

- ``closed_form`` (DAK-CF): mean-field q(w), the closed-form expected log-likelihood (eq. 39) and KL (eq. 46),
  computed from Φ's at most P·L + 1 non-zeros per row (``features.InducedGrid.sparse``);
- ``mc`` (DAK-MC): the same bound with the expected log-likelihood from ``mc_samples`` reparameterised draws of w
  (eqs. 40–43);
- ``exact`` (beyond the paper): the exact Gaussian posterior over w, trained full batch by the log marginal
  likelihood as DBK is (O(n (PM)²));
- ``auto`` (the regressor's default since 2026-12-01): ``exact`` on at most ``EXACT_MAX_ROWS`` training rows;
  above, up to ``SELECT_MAX_ROWS``, both ``closed_form`` and ``exact``, keeping the one of lower validation NLL
  (since 2026-12-02); ``closed_form`` beyond that or without a validation part (``inference_`` says which).

The mini-batch objective is (N/B) Σ_batch E_q[log p(y_i | f_i)] − KL(q ‖ p), divided by N (the ELBO per point;
the paper's code instead adds KL/B to a batch mean, spec §8). Predictions use the exact moments of f under q
(eq. 25) for both variational kinds — what the paper's 20-sample MC prediction estimates — plus the learned
noise σ².
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from neuralgp import distributed
from neuralgp.datasets.scaling import Scaler
from neuralgp.features import AdditiveGridFeatures, InducedGrid
from neuralgp.features.grid import KERNELS, MAX_LEVEL
from neuralgp.features.networks import ACTIVATIONS, extractor
from neuralgp.io import register
from neuralgp.models.base import NeuralGPClassifier
from neuralgp.models.calibration import softmax_samples
from neuralgp.models.weightspace import WeightSpaceModule, WeightSpaceRegressor
from neuralgp.params import (BAGGING, BOOL, CHECKPOINT_RULES, COMMON_RULES, NON_NEGATIVE, NONE, POSITIVE,
                             POSITIVE_INT, PREDICTIVE, RECALIBRATION, STEPS, VALIDATION_FRACTION, Rule, integer,
                             int_tuple, one_of)
from neuralgp.posterior import GaussianLikelihood, MeanFieldPosterior, elbo, mc_elbo
from neuralgp.train import adam, compiled, minibatch_epoch, train

INFERENCE = ("closed_form", "mc", "exact")
# "auto" trains the exact posterior up to this many training rows (after any held-out validation part): on the 16
# small uci sets of the calibration suite (75-1152 training rows) its NLL is 0.17 nats below the closed form's by
# plain fit; docs/methods/dak.md, "Inference by size"
EXACT_MAX_ROWS = 1500
# Above it "auto" fits both the closed form and exact and keeps the lower validation NLL, up to this many rows: a
# bound on cost (an exact fit took 23-94 s at 2-12 k rows on this CPU, 120-190 s at 28 k), not on quality; exact
# was far better on naval and gas, worse on parkinsons, pol, power (docs/methods/dak.md, "Inference by size")
SELECT_MAX_ROWS = 20_000
SELECTED = ("closed_form", "exact")
GRID_INTERVAL = (0.0, 1.0)
Q_INIT_STD = 0.05  # q(w) starts at m = 0, s = 0.05 (the paper's code: softplus(−3) ≈ 0.049), not at the prior
LEVEL = Rule(lambda v: integer(1).accepts(v) and v <= MAX_LEVEL, f"an integer in [1, {MAX_LEVEL}]")
# grid_level="auto": this level for the closed form, the paper's 3 for the other inferences; level 5 lowered
# DAK-CF's NLL on 5 of dak-table2's 6 sets (kin40k RMSE 0.0781 -> 0.0727) at ~1.1x the epoch, while exact's cost
# grows with (PM)^2 (496 weights against 112) and its NLL did not improve on the small sets (docs/methods/dak.md,
# "A finer grid")
CLOSED_FORM_LEVEL = 5
PAPER_LEVEL = 3  # the paper's grid (M = 7); the classifier's default and "auto" for exact and MC


# what the regressor and the classifier share: the grid, the feature map and its rules
FEATURE_RULES = {"backbone": one_of("mlp", "cnn"), "n_projections": POSITIVE_INT, "grid_level": LEVEL,
                 "lengthscale": POSITIVE, "kernel": one_of(*KERNELS), "hidden": int_tuple(0),
                 "embedding_dim": POSITIVE_INT, "activation": one_of(*ACTIVATIONS), "bias_std": POSITIVE,
                 "mc_samples": POSITIVE_INT, "lr": POSITIVE, "weight_decay": NON_NEGATIVE, "batch_size": POSITIVE_INT,
                 "max_epochs": POSITIVE_INT, "finetune": BOOL, "compile": BOOL, "input_scaling": one_of(*Scaler.KINDS),
                 **COMMON_RULES}


class _DAKFeatures:
    """The grid, the feature map and fine-tuning's pre-training, for the regressor and the classifier."""

    def grid(self) -> InducedGrid:
        return InducedGrid(self._grid_level(), GRID_INTERVAL, self.kernel, self.lengthscale)

    def _grid_level(self) -> int:
        return self.grid_level

    def _feature_map(self, in_dim: int) -> AdditiveGridFeatures:
        net = extractor(self.backbone, in_dim, self.embedding_dim, self.hidden, self.activation)
        return AdditiveGridFeatures(net, self.embedding_dim, self.n_projections, self.grid(), self.bias_std)

    def _pretrain(self, features: AdditiveGridFeatures, Xt, targets, n_outputs: int, loss_fn):
        """``finetune`` (App. D): network and projection with a linear head on the P projections, trained by
        ``loss_fn`` (MSE, cross-entropy) for ``max_epochs``, then frozen."""
        body = nn.Sequential(features.net, features.project)
        model = nn.Sequential(body, nn.Linear(self.n_projections, n_outputs).to(self.device))
        opt = adam(model, body, self.lr, self.weight_decay)
        gen = torch.Generator().manual_seed(self.seed)
        batch_loss = compiled(lambda idx: loss_fn(model(Xt[idx]), targets[idx]), opt, self.compile)

        def epoch():
            return minibatch_epoch(batch_loss, len(targets), int(self.batch_size), gen, opt)

        train(model, epoch, self.max_epochs, None, eval_every=self.max_epochs, verbose=self.verbose,
              desc="DAK pre-training", unit="epoch", max_seconds=self.max_time)
        body.requires_grad_(False)


@register
class DAKRegressor(_DAKFeatures, WeightSpaceRegressor):
    """Deep additive kernel GP regressor: ``inference="closed_form"`` DAK-CF, ``"mc"`` DAK-MC, ``"exact"`` DAK-exact,
    ``"auto"`` (the default since 2026-12-01; DAK-CF before) exact on at most ``EXACT_MAX_ROWS`` = 1500 training rows
    (``inference_``): exact's NLL is 0.17 ± 0.02 nats lower on the small sets (plain fit, 16 sets), where the
    mean-field closed form underfits, at ~16× the fit time. Above, up to ``SELECT_MAX_ROWS`` = 20 000, both are
    fitted (half of ``max_time`` each) and the one of lower validation NLL kept (``inference_scores_``; since
    2026-12-02): neither wins on most sets there. DAK-CF beyond, or without a validation part
    (docs/methods/dak.md, "Inference by size").

    ``n_projections`` P base GPs on a level-``grid_level`` grid (M = 2^L − 1 points on (0, 1)) with a
    ``kernel`` of fixed ``lengthscale``; ``grid_level="auto"`` (the default since 2026-12-07; 3 before, the
    paper's): level 5 (M = 31) for the closed form, 3 (M = 7) for exact and MC (``_grid_level``) — of the 11
    calibration sets above 1500 rows, NLL lower on 5 of the 8 where the closed form is kept, higher by at most
    0.011 on 3, at 1.07-1.2x the fit time (docs/methods/dak.md, "The grid by inference"); the network D →
    ``hidden`` → ``embedding_dim`` (D_w) → P (``backbone="cnn"``: a small CNN on square one-channel images given
    as rows of pixels, ``hidden`` unused).
    The noise σ² is learned from ``noise_init`` (the paper fixes 0.01). ``finetune=True`` pre-trains the network by MSE
    for ``max_epochs``, freezes it and fits the last layer (σ_p, q, σ²) only (App. D). ``compile=True`` runs the
    mini-batch step through torch.compile (``train.compiled``; measured in docs/methods/dak.md).

    Defaults differ from the paper's (lengthscale 1, lr 1e-3, 100 epochs), which underfit the small shared sets:
    lengthscale 0.3 on the (0, 1) grid, lr 3e-3, up to 1000 epochs with early stopping on the validation part
    (every 10 epochs, patience 200); docs/methods/dak.md has the measurements. ``dak-table2`` sets the paper's.
    ``projection_spread=s`` rescales the projection layer before training so that each projection has mean 0 and
    std s on the training rows (``AdditiveGridFeatures.standardise_projections``); at PyTorch's start (None, the
    default) they spread with std ≈ 0.3, in the grid's two middle cells. s = 1 fits the large sets better (kin40k,
    bike, naval) and the small smooth ones worse (yacht, concreteslump): docs/methods/dak.md, "Standardised
    projections".
    ``predictive="student_t"`` (the default since 2026-11-29; "gaussian" before and in the paper): the recalibrated
    mean and variance with a t's shape fitted to the held-out z-scores (``NeuralGPRegressor._fit_predictive_shape``).
    ``bagging="auto"`` (the default since 2026-11-29): where α would be cross-fitted (a validation part under 100
    rows), a bag of 8 members refitted on halves of the rows predicts instead of the single fit, at cross-fitting's
    cost (``NeuralGPRegressor._fit_bag``, as ``DBKRegressor(bagging=8)``): the members' disagreement widens the bands
    where the mean-field last layer's do not; calibrated on 2 more small sets, lower NLL on 11 of 16, higher RMSE on
    the smooth ones (docs/methods/dak.md, "A bag on small data"). ``bagging=0``: the single fit; an even M: M members.
    """

    name = "DAK"
    param_rules = {**FEATURE_RULES, "grid_level": (LEVEL, one_of("auto")), "inference": one_of(*INFERENCE, "auto"),
                   "max_iter": STEPS, "max_epochs": STEPS,
                   "eval_every": (NONE, POSITIVE_INT), "patience": (NONE, POSITIVE_INT), "noise_init": POSITIVE,
                   "noise_min": NON_NEGATIVE, "projection_spread": (NONE, POSITIVE), "normalize_y": BOOL,
                   "validation_fraction": VALIDATION_FRACTION,
                   "recalibration": RECALIBRATION, "predictive": PREDICTIVE, "bagging": BAGGING, **CHECKPOINT_RULES}

    def __init__(self, n_projections=16, grid_level="auto", lengthscale=0.3, kernel="laplace", inference="auto",
                 backbone="mlp", hidden=(64, 32), embedding_dim=64, activation="relu", mc_samples=8, lr=3e-3,
                 weight_decay=5e-4, batch_size=512, max_epochs=1000, max_iter=2000, eval_every=None, patience=None,
                 max_time=None, compile=False, noise_init=0.1, noise_min=1e-6, bias_std=1.0, projection_spread=None,
                 finetune=False, normalize_y=True,
                 input_scaling="standard", validation_fraction=0.1, recalibration=True, predictive="student_t",
                 bagging="auto", seed=0, device="cpu", verbose=True, checkpoint=None, checkpoint_every=100):
        self.n_projections = n_projections
        self.grid_level = grid_level
        self.lengthscale = lengthscale
        self.kernel = kernel
        self.inference = inference
        self.backbone = backbone
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
        self.compile = compile
        self.noise_init = noise_init
        self.noise_min = noise_min
        self.bias_std = bias_std
        self.projection_spread = projection_spread
        self.finetune = finetune
        self.normalize_y = normalize_y
        self.input_scaling = input_scaling
        self.validation_fraction = validation_fraction
        self.recalibration = recalibration
        self.predictive = predictive
        self.bagging = bagging
        self.seed = seed
        self.device = device
        self.verbose = verbose
        self.checkpoint = checkpoint
        self.checkpoint_every = checkpoint_every

    def _inference(self) -> str:
        """The inference this fit uses: ``inference_`` once resolved, else the parameter ("auto" unresolved)."""
        return getattr(self, "inference_", None) or self.inference

    def _is_exact(self) -> bool:
        return self._inference() == "exact"

    def _grid_level(self) -> int:
        """``grid_level``; "auto": ``CLOSED_FORM_LEVEL`` for the closed form, ``PAPER_LEVEL`` otherwise."""
        if self.grid_level != "auto":
            return self.grid_level
        return CLOSED_FORM_LEVEL if self._inference() == "closed_form" else PAPER_LEVEL

    def _fit_scaled(self, X, y, X_val, y_val):
        rows = distributed.total_count(len(y))
        self.__dict__.pop("inference_scores_", None)
        if self.inference != "auto":
            self.inference_ = self.inference
        elif rows <= EXACT_MAX_ROWS:
            self.inference_ = "exact"
        elif X_val is None or rows > SELECT_MAX_ROWS:
            self.inference_ = "closed_form"
        else:
            return self._fit_selected(X, y, X_val, y_val)
        return super()._fit_scaled(X, y, X_val, y_val)

    def _fit_selected(self, X, y, X_val, y_val):
        """Each inference of ``SELECTED`` fitted in turn (each with half of ``max_time``), the one whose early
        stopping kept the lower validation NLL kept (``inference_``; ``inference_scores_``: each one's NLL)."""
        fits, max_time = {}, self.max_time
        try:
            if max_time is not None:
                self.max_time = max_time / len(SELECTED)
            self._selecting = True  # each candidate its own checkpoint (``_checkpoint``)
            for kind in SELECTED:
                self.inference_ = kind
                super()._fit_scaled(X, y, X_val, y_val)
                fits[kind] = {k: v for k, v in vars(self).items() if k.endswith("_") and not k.startswith("_")}
        finally:
            self.max_time = max_time
            self.__dict__.pop("_selecting", None)
        self.inference_scores_ = {kind: float(fit["train_log_"].best_val_nll) for kind, fit in fits.items()}
        nll = lambda kind: self.inference_scores_[kind] if math.isfinite(self.inference_scores_[kind]) else math.inf
        self.__dict__.update(fits[min(SELECTED, key=nll)])  # the first of equals
        return self

    def _checkpoint(self, optimizer, Xt, yt, val=None, *generators):
        checkpoint = super()._checkpoint(optimizer, Xt, yt, val, *generators)
        if checkpoint is not None and getattr(self, "_selecting", False):  # path.closed_form, path.exact
            checkpoint.path = f"{checkpoint.path}.{self.inference_}"
            checkpoint.fingerprint += f":{self.inference_}"
        return checkpoint

    def build_module(self, in_dim: int) -> WeightSpaceModule:
        """A fresh (untrained) module: the DAK feature map, σ², and q(w) (mean field) unless exact."""
        features = self._feature_map(in_dim)
        q_init = {} if self._is_exact() else {"init_std": Q_INIT_STD}
        return WeightSpaceModule(features, features.n_columns, self.noise_init, self.noise_min,
                                 svi=not self._is_exact(), family="meanfield", **q_init).to(self.device)

    def _svi_objective(self, Xb, yb, n):
        m = self.module_
        phi, likelihood = m.net.sparse(Xb), GaussianLikelihood(m.noise())
        if self._inference() == "mc":
            return mc_elbo(phi, yb, m.q, likelihood, int(self.mc_samples), n_total=n)
        return elbo(phi, yb, m.q, likelihood, n_total=n)

    def supports_distributed(self) -> bool:
        return not self.finetune  # the pre-training is one process's

    def _refit_budget(self, trained_rows, rows):
        # max_epochs also sets fine-tuning's pre-training, which early stopping did not choose; a refit (a bag's
        # member, a cross-fitting fold) keeps this fit's inference, whatever "auto" would pick on its rows
        if self.finetune:
            return None
        return {**super()._refit_budget(trained_rows, rows), "inference": self._inference()}

    def _fitted_state(self) -> dict:
        return {**super()._fitted_state(), "inference": self.inference_,
                "inference_scores": getattr(self, "inference_scores_", None)}

    def _restore(self, state: dict):
        self.inference_ = state.get("inference", self.inference)  # models saved before "auto" hold no choice
        if state.get("inference_scores") is not None:
            self.inference_scores_ = state["inference_scores"]
        super()._restore(state)

    def _prepare(self, Xt, yt):
        if self.projection_spread is not None:
            self.module_.net.standardise_projections(Xt, self.projection_spread)
        if self.finetune:
            self._pretrain(self.module_.net, Xt, yt.float(), 1, lambda out, y: ((out.squeeze(-1) - y) ** 2).mean())


@register
class DAKClassifier(_DAKFeatures, NeuralGPClassifier):
    """DAK classification: the regressor's P·M + 1 features shared by C latent functions, each with its own
    mean-field weights; trained by the ELBO with the softmax likelihood estimated from ``mc_samples`` draws of each
    point's latent f_i from its Gaussian marginal under q (local reparameterisation: the same expectation as the
    paper's weight draws, since the bound sums per-point expectations, at C·B·P·L cost instead of S·C·B·P·L).

    Probabilities are E_q[softmax(f/T)], the average of the *probabilities* over draws of f: the posterior
    predictive (the paper's code averages the logits first, which is not an expectation of anything); per point and
    class f is Gaussian under the mean-field q, so the draws are from those exact marginals (``n_samples`` of them).
    T is fitted on (X_cal, y_cal) when given (temperature scaling, as FM-GP's classifier). Trains ``max_epochs``
    epochs, no early stopping.
    """

    param_rules = {**FEATURE_RULES, "n_samples": POSITIVE_INT}

    def __init__(self, n_projections=16, grid_level=PAPER_LEVEL, lengthscale=0.3, kernel="laplace",
                 backbone="mlp", hidden=(64, 32), embedding_dim=64, activation="relu", mc_samples=8, n_samples=256,
                 lr=3e-3, weight_decay=5e-4, batch_size=512, max_epochs=100, max_time=None, compile=False,
                 bias_std=1.0, finetune=False, input_scaling="standard", seed=0, device="cpu", verbose=True):
        self.n_projections = n_projections
        self.grid_level = grid_level
        self.lengthscale = lengthscale
        self.kernel = kernel
        self.backbone = backbone
        self.hidden = hidden
        self.embedding_dim = embedding_dim
        self.activation = activation
        self.mc_samples = mc_samples
        self.n_samples = n_samples
        self.lr = lr
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.max_epochs = max_epochs
        self.max_time = max_time
        self.compile = compile
        self.bias_std = bias_std
        self.finetune = finetune
        self.input_scaling = input_scaling
        self.seed = seed
        self.device = device
        self.verbose = verbose

    def _new_module(self, in_dim: int, C: int) -> nn.Module:
        features = self._feature_map(in_dim)
        module = nn.Module()
        module.net, module.q = features, MeanFieldPosterior(features.n_columns, Q_INIT_STD, outputs=C)
        return module.to(self.device)

    def _fit_scaled(self, X, labels, C):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.module_ = m = self._new_module(X.shape[1], C)
            Xt, lt = self._tensor(X), torch.as_tensor(labels, device=self.device)
            n = len(labels)
            if self.finetune:
                self._pretrain(m.net, Xt, lt, C, nn.functional.cross_entropy)
            opt = adam(m, m.net, self.lr, self.weight_decay)
            gen = torch.Generator().manual_seed(self.seed)

            def batch_loss(idx):  # −ELBO / n: (n/B) Σ_batch E_q[log softmax(f_i)_y_i] − KL
                mean, var = m.q.predict_f(m.net.sparse(Xt[idx]))  # (C, B): f_i's marginal under q
                eps = torch.randn(int(self.mc_samples), *mean.shape, dtype=mean.dtype, device=mean.device)
                f = (mean + var.sqrt() * eps).transpose(-1, -2)  # (S, B, C)
                log_lik = torch.log_softmax(f, -1).gather(-1, lt[idx].expand(f.shape[0], -1)[..., None])
                return -((n / len(idx)) * log_lik.mean(0).sum() - m.q.kl_divergence()) / n

            batch_loss = compiled(batch_loss, opt, self.compile)
            self.train_log_ = train(m, lambda: minibatch_epoch(batch_loss, n, int(self.batch_size), gen, opt),
                                    self.max_epochs, None, eval_every=self.max_epochs, verbose=self.verbose,
                                    desc="DAK classifier", unit="epoch", max_seconds=self.max_time)
            m.eval()
        self.n_iter_ = self.train_log_.steps

    def predict_latent(self, X) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance (n, C) of the latent class functions f_c(x) under q (before the softmax)."""
        mean, var_f = self._latent(self._scaled(X))
        return mean.cpu().numpy(), var_f.cpu().numpy()

    def _latent(self, Xs):
        with torch.no_grad():
            mean, var_f = self.module_.q.predict_f(self.module_.net.sparse(self._tensor(Xs)))  # (C, m)
        return mean.T.double(), var_f.T.double()

    def _latent_samples(self, Xs) -> torch.Tensor:
        mean, var_f = self._latent(Xs)
        return softmax_samples(mean, var_f, self.n_samples, self.seed)

    def _fitted_state(self) -> dict:
        return {"module": {k: v.cpu() for k, v in self.module_.state_dict().items()}, "n_iter": self.n_iter_}

    def _restore(self, state: dict):
        self.module_ = self._new_module(self.n_features_in_, len(self.classes_))
        self.module_.load_state_dict(state["module"])
        self.module_.eval()
        self.n_iter_ = state["n_iter"]

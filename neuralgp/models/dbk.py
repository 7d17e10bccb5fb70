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

import warnings

import torch

from neuralgp import distributed
from neuralgp.chunking import EXACT_TRAIN_ROWS
from neuralgp.datasets.scaling import Scaler
from neuralgp.features import ConstantNorm, build_backbone
from neuralgp.features.networks import ACTIVATIONS, BACKBONES
from neuralgp.errors import ParameterError
from neuralgp.io import register
from neuralgp.models.weightspace import WeightSpaceModule, WeightSpaceRegressor
from neuralgp.params import (BAGGING, BOOL, CHECKPOINT_RULES, COMMON_RULES, NON_NEGATIVE, NONE, POSITIVE,
                             POSITIVE_INT, PREDICTIVE, RECALIBRATION, STEPS, VALIDATION_FRACTION, one_of)
from neuralgp.posterior import PRECISIONS, ExactPosterior, inverse_softplus, stream_stats
from neuralgp.posterior.variational import FAMILIES

# init_hyperparameters="auto": the fitted start on up to this many training rows (the sizes where it was measured),
# and only where the evidence raises s² at most this much (a random-feature GP that already fits the data)
FITTED_START_MAX_ROWS = 2000
FITTED_START_MAX_SCALE2 = 50.0


@register
class DBKRegressor(WeightSpaceRegressor):
    """Deep basis kernel GP regressor with exact (``inference="exact"``) or SVI (``"svi"``, SVDBK) inference.

    Ablations of the paper: ``variance_correction=False`` (-c), ``rank=1`` (-r), both (-cr). ``compile=True``: SVI's
    mini-batch step through torch.compile (``train.compiled``); the exact path is not compiled. The predictive of y
    is a Student-t of the recalibrated mean and variance, its degrees of freedom fitted to the held-out z-scores
    (``predictive="student_t"``, the default since 2026-11-29; ``"gaussian"`` for the paper's N).

    ``bagging="auto"`` (the default since 2026-11-29, fifteenth session): with exact inference, 8 members retrained
    on halves of the rows for the steps early stopping kept predict together exactly where α would be cross-fitted
    (a validation part under 100 rows), in place of cross-fitting and at its cost (``NeuralGPRegressor._fit_bag``;
    their variance scale α from the rows each member did not train on): NLL at most every baseline's on 3 more of
    the calibration suite's sets (docs/methods/dbk.md, "The bag by default on small data"). SVI (SVDBK) does not bag by
    default: its bag is not measured. ``bagging=M`` (an even number): M members whatever the size, at M/2 more
    fits; 0: the single fit. ``features``, ``noise_variance_`` and ``fit_posterior`` are the full fit's, which a
    bag does not predict with: ``features`` and ``fit_posterior`` refuse; the members are ``members_``.

    ``init_hyperparameters="auto"`` (the default since 2026-11-30, twenty-second session): before training, σ² and
    the feature scale s take their maximum marginal-likelihood values under the untrained network (``_prepare``) —
    with exact inference and constant-norm features on at most ``FITTED_START_MAX_ROWS`` training rows, and only
    where that raises s² at most ``FITTED_START_MAX_SCALE2``-fold: where the random features already explain the data
    (noisy and smooth sets). Where the evidence wants s² × 10²–10⁶, the network has to learn its features, and a
    fitted start there was measured worse; those fits, and larger data (not measured), start from σ² =
    ``noise_init`` and s = 1. ``fitted_start_`` says which; a bag's members and cross-fitted refits start as the
    fit did. ``True`` fits the start whatever the size and scale, ``False`` never (docs/methods/dbk.md, "A fitted
    start where the random features fit").
    """

    name = "DBK"

    param_rules = {
        "rank": POSITIVE_INT, "backbone": one_of(*BACKBONES), "hidden": POSITIVE_INT, "depth": POSITIVE_INT,
        "activation": one_of(*ACTIVATIONS), "inference": one_of("exact", "svi"), "variance_correction": BOOL,
        "normalize_features": (one_of("auto"), BOOL), "variational_family": one_of(*FAMILIES),
        "training_gram_precision": one_of(*PRECISIONS), "chunk_size": (NONE, POSITIVE_INT), "lr": POSITIVE,
        "weight_decay": NON_NEGATIVE, "batch_size": POSITIVE_INT, "max_iter": STEPS,
        "max_epochs": STEPS, "compile": BOOL, "eval_every": (NONE, POSITIVE_INT), "patience": (NONE, POSITIVE_INT),
        "noise_init": POSITIVE, "noise_lr": (NONE, POSITIVE), "noise_min": NON_NEGATIVE, "normalize_y": BOOL,
        "input_scaling": one_of(*Scaler.KINDS), "validation_fraction": VALIDATION_FRACTION,
        "recalibration": RECALIBRATION, "predictive": PREDICTIVE, "bagging": BAGGING,
        "init_hyperparameters": (one_of("auto"), BOOL), **CHECKPOINT_RULES, **COMMON_RULES}

    def __init__(self, rank=128, backbone="resnet", hidden=128, depth=2, activation="tanh", inference="exact",
                 variance_correction=True, normalize_features="auto", variational_family="full",
                 training_gram_precision="mixed", chunk_size=EXACT_TRAIN_ROWS, lr=1e-3,
                 weight_decay=1e-4, batch_size=256, max_iter=10000, max_epochs=2000, eval_every=None,
                 patience=None, max_time=None, compile=False, noise_init=0.1, noise_lr=None, noise_min=1e-6,
                 normalize_y=True,
                 input_scaling="minmax", validation_fraction=0.1, recalibration=True, predictive="student_t",
                 bagging="auto", init_hyperparameters="auto", seed=0, device="cpu", verbose=True, checkpoint=None,
                 checkpoint_every=100):
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
        self.compile = compile
        self.noise_init = noise_init
        self.noise_lr = noise_lr
        self.noise_min = noise_min
        self.normalize_y = normalize_y
        self.input_scaling = input_scaling
        self.validation_fraction = validation_fraction
        self.recalibration = recalibration
        self.predictive = predictive
        self.bagging = bagging
        self.init_hyperparameters = init_hyperparameters
        self.seed = seed
        self.device = device
        self.verbose = verbose
        self.checkpoint = checkpoint
        self.checkpoint_every = checkpoint_every

    # -- construction ----------------------------------------------------------------------------
    def uses_normalized_features(self) -> bool:
        if self.normalize_features == "auto":
            return bool(self.variance_correction) and self.rank >= 2
        return bool(self.normalize_features)

    def uses_variance_correction(self) -> bool:
        return bool(self.variance_correction)

    def trains_trace_regulariser(self) -> bool:
        """The trace term is trained only for free features: with constant-norm features it is zero."""
        return bool(self.variance_correction) and not self.uses_normalized_features()

    def _bag_members(self, rows_y, n_val: int) -> int:
        """As the base's, but "auto" bags with exact inference only (SVDBK's bag is not measured)."""
        if self.bagging == "auto" and not self._is_exact():
            return 0
        return super()._bag_members(rows_y, n_val)

    def _is_exact(self) -> bool:
        return self.inference == "exact"

    def _start_can_be_fitted(self) -> bool:
        """The fitted start needs exact inference and constant-norm features (a learned scale s)."""
        return self._is_exact() and self.uses_normalized_features()

    def _prepare(self, Xt, yt):
        """``init_hyperparameters``: σ² and s by type-II maximum likelihood, log N(y; 0, c·ΦΦᵀ + σ²I) with the
        untrained features Φ frozen — two numbers by L-BFGS on the r × r statistics (DBK eq. 5), summed once over
        the rows (and the workers); "auto" keeps them only where c ≤ ``FITTED_START_MAX_SCALE2``."""
        self.fitted_start_ = False
        mode, m = self.init_hyperparameters, self.module_
        if not mode or (mode == "auto" and not (self._start_can_be_fitted()
                                                and distributed.total_count(len(Xt)) <= FITTED_START_MAX_ROWS)):
            return
        stats = distributed.reduce_stats(stream_stats(m, self._in_memory(Xt, yt)()))
        # log σ² and log c, the factor on s²; each start: the module's own
        theta = torch.stack([torch.log(m.noise().detach().double()), torch.zeros((), dtype=torch.float64)])
        theta.requires_grad_(True)
        opt = torch.optim.LBFGS([theta], max_iter=200, tolerance_grad=1e-9, line_search_fn="strong_wolfe")

        def loss():
            opt.zero_grad()
            value = -ExactPosterior(stats, theta[0].exp(), theta[1].exp()).log_marginal_likelihood() / stats.n
            value.backward()
            return value
        try:
            opt.step(loss)
        except FloatingPointError:  # the line search went where c·ΦᵀΦ + σ²I is numerically singular (c → ∞)
            if mode is True:  # asked for (or a bag member of a fit that had it): said, then the module's own start
                warnings.warn("DBK's fitted start (init_hyperparameters=True, or a bag member of a fit that had "
                              "it): the marginal likelihood of the untrained features grows without bound in their "
                              "scale on these rows (they nearly interpolate the targets); this fit starts from the "
                              "default σ² and scale instead", RuntimeWarning, stacklevel=2)
            return
        if mode == "auto" and float(theta[1].detach().exp()) > FITTED_START_MAX_SCALE2:
            return
        with torch.no_grad():
            excess = max(float(theta[0].exp()) - m.noise.floor, 1e-3 * max(m.noise.floor, 1e-9))
            m.noise.raw.fill_(inverse_softplus(excess))
            m.net.log_scale.add_(0.5 * theta[1].to(m.net.log_scale.dtype))
        self.fitted_start_ = True

    def _clone_for_refit(self, **budget):
        """A bag's members and cross-fitted refits start as this fit did (fitted or not), whatever their rows say."""
        return super()._clone_for_refit(init_hyperparameters=self.fitted_start_, **budget)

    def _fitted_state(self) -> dict:
        return {**super()._fitted_state(), "fitted_start": self.fitted_start_}

    def _restore(self, state: dict):
        super()._restore(state)
        self.fitted_start_ = state.get("fitted_start", False)  # files from before it: the start was never fitted

    def build_module(self, in_dim: int) -> WeightSpaceModule:
        """A fresh (untrained) module for inputs of dimension ``in_dim``."""
        if self.inference not in ("exact", "svi"):
            raise ValueError(f"inference must be 'exact' or 'svi', got {self.inference!r}")
        if int(self.rank) < 1:
            raise ValueError(f"rank must be >= 1, got {self.rank}")
        if self.init_hyperparameters is True and not self._start_can_be_fitted():
            raise ParameterError("init_hyperparameters=True fits σ² and the scale of constant-norm features before "
                                 "exact training: it needs inference='exact' and normalize_features on (rank >= 2)")
        net = build_backbone(self.backbone, in_dim, self.rank, self.hidden, self.depth, self.activation)
        if self.uses_normalized_features():
            net = ConstantNorm(net)
        return WeightSpaceModule(net, self.rank, self.noise_init, self.noise_min, self.inference == "svi",
                                 self.variational_family).to(self.device)

"""The standard GPs users compare against, taken from GPyTorch and wrapped in neuralgp's estimator interface.

One class per inference scheme — exact (``ExactGPRegressor``), Titsias' collapsed sparse bound (``SGPRRegressor``),
mini-batch SVGP (``SVGPRegressor``) — and the deep-kernel versions of each (DKL, sDKL, SVDKL), which put a feature
network (the same backbones as DBK, h = ``feature_dim`` outputs) in front of the kernel. Kernels come from the
registry in ``neuralgp.kernels``. ``GPyTorchDBKRegressor`` (an exact GP with a linear kernel on r network
features: DBK without correction, written in GPyTorch) exists for speed comparisons.

Defaults follow the DBK paper's baselines (docs/methods/baselines.md): RBF with one lengthscale per input (ARD)
started at √(input dimension), 128 learned inducing points, the ResNet backbone of DBK, Adam lr 1e-3, weight decay
1e-4 on network weights, batch 256, noise started at 1e-2 above a floor of 1e-6, CG with at most 512 iterations and
LOVE of rank 512 for exact models. Exact and SGPR posteriors depend on every training point, so their saved files
include the (scaled) training data; SVGP and SVDKL files do not. ``dtype="float64"`` is GPyTorch's own advice for
the float32 Cholesky/CG break-downs its users report (slower, twice the memory).
"""

from __future__ import annotations

import contextlib
import math

import gpytorch
import numpy as np
import torch
from gpytorch.constraints import GreaterThan
from gpytorch.distributions import MultivariateNormal
from gpytorch.kernels import InducingPointKernel
from gpytorch.means import ConstantMean, ZeroMean
from gpytorch.variational import (CholeskyVariationalDistribution, GridInterpolationVariationalStrategy,
                                  IndependentMultitaskVariationalStrategy, LMCVariationalStrategy,
                                  VariationalStrategy)
from linear_operator.operators import DiagLinearOperator
from linear_operator.utils.errors import NanError, NotPSDError
from torch import nn

from neuralgp import distributed
from neuralgp.datasets.scaling import Scaler
from neuralgp.errors import ResourceLimitError
from neuralgp.features import build_backbone
from neuralgp.features.networks import ACTIVATIONS, BACKBONES, extractor
from neuralgp.io import register
from neuralgp.kernels import KERNELS, make_kernel, predicting
from neuralgp.models.base import NeuralGPClassifier, NeuralGPRegressor
from neuralgp.models.calibration import softmax_samples
from neuralgp.params import (BOOL, CHECKPOINT_RULES, COMMON_RULES, NON_NEGATIVE, NONE, POSITIVE, POSITIVE_INT,
                             int_tuple, one_of)
from neuralgp.posterior.dirichlet import dirichlet_targets
from neuralgp.train import adam, minibatch_epoch, steps_per_epoch, train

NUMERICAL_ERRORS = (NanError, NotPSDError)
# early stopping's default patience: 2000 optimizer steps (checks every 100), for the mini-batch scheme also at
# least 200 epochs (checks every 10): on small sets an epoch is one step, and 200 steps from GPyTorch's start ended
# SVGP before it had learned anything (uci/breastcancer mask 0: RMSE 1.072, the exact GP's 0.831; 0.841 with 2000)
PATIENCE_STEPS, PATIENCE_EPOCHS = 2000, 200


class _ExactModel(gpytorch.models.ExactGP):
    def __init__(self, X, y, likelihood, covar, feature=None):
        super().__init__(X, y, likelihood)
        self.feature = feature
        self.mean_module = ZeroMean()
        self.covar_module = covar

    def forward(self, x):
        z = self.feature(x) if self.feature is not None else x
        return MultivariateNormal(self.mean_module(z), self.covar_module(z))


class _SVGPLayer(gpytorch.models.ApproximateGP):
    def __init__(self, inducing: torch.Tensor, covar):
        q = CholeskyVariationalDistribution(inducing.shape[0])
        super().__init__(VariationalStrategy(self, inducing, q, learn_inducing_locations=True))
        self.mean_module = ZeroMean()
        self.covar_module = covar

    def forward(self, z):
        return MultivariateNormal(self.mean_module(z), self.covar_module(z))


class _SVGPModel(nn.Module):
    """Optional feature network followed by an SVGP layer (SVDKL when the network is there)."""

    def __init__(self, inducing, covar, feature=None):
        super().__init__()
        self.feature = feature
        self.gp = _SVGPLayer(inducing, covar)

    def forward(self, x):
        return self.gp(self.feature(x) if self.feature is not None else x)

    def inducing_shape(self) -> list[int]:
        return list(self.gp.variational_strategy.inducing_points.shape)


class _GridAdditiveLayer(gpytorch.models.ApproximateGP):
    """P independent 1-D GPs, each with ``grid_size`` variational inducing values on a fixed grid over [0, 1]
    (KISS-GP interpolation), mixed into one output by learned weights (LMC with one task)."""

    def __init__(self, P: int, grid_size: int, covar):
        q = CholeskyVariationalDistribution(grid_size, batch_shape=torch.Size([P]))
        grid = GridInterpolationVariationalStrategy(self, grid_size=grid_size, grid_bounds=[(0.0, 1.0)],
                                                    variational_distribution=q)
        super().__init__(LMCVariationalStrategy(grid, num_tasks=1, num_latents=P, latent_dim=-1))
        self.mean_module = ZeroMean(batch_shape=torch.Size([P]))
        self.covar_module = covar

    def forward(self, h):
        return MultivariateNormal(self.mean_module(h), self.covar_module(h))


class _GridAdditiveModel(nn.Module):
    """Network → P outputs squashed into (0, 1) by a sigmoid → one grid GP per output, summed with LMC weights.
    Returns the marginals of f (all that the Gaussian ELBO and the predictive use)."""

    def __init__(self, feature, P: int, grid_size: int, covar):
        super().__init__()
        self.feature = feature
        self.gp = _GridAdditiveLayer(P, grid_size, covar)

    def forward(self, x):
        h = torch.sigmoid(self.feature(x))  # (n, P)
        f = self.gp(h.T.unsqueeze(-1))  # P batched 1-D inputs → (n, 1) multitask
        return MultivariateNormal(f.mean[..., 0], DiagLinearOperator(f.variance[..., 0]))

    def inducing_shape(self) -> list[int]:
        return [1]


class GPyTorchRegressor(NeuralGPRegressor):
    """What every GPyTorch baseline shares: parameters, the optional feature network, the kernel, the likelihood,
    fitting with validation, prediction and persistence. A scheme subclass supplies ``_gp_model`` (the GPyTorch
    model), ``_training_loop`` and ``_memory_columns``; ``deep = True`` puts the network in front of the kernel.

    ``base_kernel=None`` and ``feature_dim=None`` mean the class defaults (``default_kernel``, ``default_feature_dim``).
    Parameters a scheme does not use (``num_inducing`` for exact GPs, the network's without ``deep``) are ignored.
    """

    deep = False
    default_kernel = "rbf"
    default_feature_dim = 2
    keeps_training_data = True
    param_rules = {
        "num_inducing": POSITIVE_INT, "feature_dim": (NONE, POSITIVE_INT), "backbone": one_of(*BACKBONES),
        "hidden": POSITIVE_INT, "depth": POSITIVE_INT, "activation": one_of(*ACTIVATIONS), "lr": POSITIVE,
        "weight_decay": NON_NEGATIVE, "batch_size": POSITIVE_INT, "max_iter": POSITIVE_INT,
        "max_epochs": POSITIVE_INT, "eval_every": (NONE, POSITIVE_INT), "patience": (NONE, POSITIVE_INT),
        "noise_init": POSITIVE, "noise_min": NON_NEGATIVE, "cg_iterations": POSITIVE_INT, "love_rank": POSITIVE_INT,
        "max_memory_gb": POSITIVE, "dtype": one_of("float32", "float64"), "base_kernel": (NONE, one_of(*KERNELS)),
        "ard": BOOL, "normalize_y": BOOL, "input_scaling": one_of(*Scaler.KINDS), **CHECKPOINT_RULES,
        **COMMON_RULES}

    def __init__(self, num_inducing=128, feature_dim=None, backbone="resnet", hidden=128, depth=2, activation="tanh",
                 lr=1e-2, weight_decay=1e-4, batch_size=256, max_iter=10000, max_epochs=2000, eval_every=None,
                 patience=None, max_time=None, noise_init=0.1, noise_min=1e-6, cg_iterations=512, love_rank=512,
                 max_memory_gb=8.0, dtype="float32", base_kernel=None, ard=True, normalize_y=True,
                 input_scaling="minmax", seed=0, device="cpu", verbose=True, checkpoint=None,
                 checkpoint_every=100):
        self.num_inducing = num_inducing
        self.feature_dim = feature_dim
        self.backbone = backbone
        self.hidden = hidden
        self.depth = depth
        self.activation = activation
        self.lr = lr
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.max_epochs = max_epochs
        self.eval_every = eval_every
        self.patience = patience
        self.max_time = max_time
        self.noise_init = noise_init
        self.noise_min = noise_min
        self.cg_iterations = cg_iterations
        self.love_rank = love_rank
        self.max_memory_gb = max_memory_gb
        self.dtype = dtype
        self.base_kernel = base_kernel
        self.ard = ard
        self.normalize_y = normalize_y
        self.input_scaling = input_scaling
        self.seed = seed
        self.device = device
        self.verbose = verbose
        self.checkpoint = checkpoint
        self.checkpoint_every = checkpoint_every

    # -- construction ----------------------------------------------------------------------------
    def _torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    def _as_tensor(self, a) -> torch.Tensor:
        return self._tensor(a, dtype=self._torch_dtype(), device=self.device)

    def estimated_memory_gb(self, n: int) -> float:
        """Rough training peak: three n × (n or M) matrices of the working dtype."""
        return 3 * (8 if self.dtype == "float64" else 4) * n * self._memory_columns(n) / 1e9

    def _feature(self, in_dim: int):
        """(network or None, dimension the kernel sees)."""
        if not self.deep:
            return None, in_dim
        out = self.feature_dim or self.default_feature_dim
        net = build_backbone(self.backbone, in_dim, out, self.hidden, self.depth, self.activation)
        return net.to(device=self.device, dtype=self._torch_dtype()), out

    def _kernel(self, dim: int):
        """The registry kernel, lengthscales started at √dim (the DBK paper's baselines)."""
        return make_kernel(self.base_kernel or self.default_kernel, dim, ard=self.ard, lengthscale=math.sqrt(dim))

    def _initial_inducing(self, Xt, feature):
        """``num_inducing`` random training points (at most n), through the network if any; in a process group
        rank 0's, on every worker."""
        gen = torch.Generator().manual_seed(self.seed)
        idx = torch.randperm(len(Xt), generator=gen)[:self.num_inducing]
        with torch.no_grad():
            Z = Xt[idx] if feature is None else feature(Xt[idx])
        return distributed.from_main(Z.clone())

    def build(self, Xt: torch.Tensor, yt: torch.Tensor) -> nn.ModuleList:
        """Fresh GPyTorch model and likelihood for scaled training tensors (``model_``, ``likelihood_``); returns
        both as one ModuleList (what the optimiser trains)."""
        feature, dim = self._feature(Xt.shape[1])
        self.likelihood_ = gpytorch.likelihoods.GaussianLikelihood(noise_constraint=GreaterThan(self.noise_min))
        self.likelihood_.noise = self.noise_init
        self.model_ = self._gp_model(Xt, yt, feature, self._kernel(dim))
        self.model_.to(device=self.device, dtype=self._torch_dtype())
        self.likelihood_.to(device=self.device, dtype=self._torch_dtype())
        return self._modules()

    def _modules(self) -> nn.ModuleList:
        return nn.ModuleList([self.model_, self.likelihood_])

    def optimizer(self) -> torch.optim.Optimizer:
        """Adam over the built model, weight decay on the network's weights only."""
        feature = getattr(self.model_, "feature", None)
        return adam(self._modules(), feature if feature is not None else nn.Module(), self.lr, self.weight_decay)

    def settings(self, predict: bool = False) -> contextlib.ExitStack:
        """GPyTorch settings of this model: CG iterations, LOVE rank, and LOVE (fast_pred_var) for prediction."""
        stack = contextlib.ExitStack()
        stack.enter_context(gpytorch.settings.max_cg_iterations(self.cg_iterations))
        stack.enter_context(gpytorch.settings.max_root_decomposition_size(self.love_rank))
        if predict:
            stack.enter_context(gpytorch.settings.fast_pred_var())
            stack.enter_context(predicting())
        return stack

    # -- fitting -----------------------------------------------------------------------------------
    def _fit_scaled(self, X, y, X_val, y_val):
        need = self.estimated_memory_gb(len(y))
        if need > self.max_memory_gb:
            raise ResourceLimitError(f"{type(self).__name__} on n = {len(y)} needs about {need:.1f} GB "
                                     f"> max_memory_gb = {self.max_memory_gb}; use a sparse or SVI model")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            Xt, yt = self._as_tensor(X), self._as_tensor(y)
            modules = self.build(Xt, yt)
            validate = None
            if X_val is not None:
                X_val_t = self._as_tensor(X_val)

                def validate():  # over every worker's validation rows
                    value = self._validation_nll((X_val_t, y_val), self._predict_torch)
                    modules.train()
                    return value
            with self.settings():
                self.train_log_ = self._training_loop(Xt, yt, self.optimizer(), validate)
        modules.eval()
        self.n_iter_ = self.train_log_.steps
        return self

    # -- prediction --------------------------------------------------------------------------------
    def _predict_torch(self, Xt):
        modules = self._modules()
        modules.eval()
        with torch.no_grad(), self.settings(predict=True):
            f = self.model_(Xt)
            mean, var_f = f.mean.double(), f.variance.double().clamp_min(0)
        return mean, var_f, var_f + self.likelihood_.noise.detach().double().squeeze()

    def _predict_scaled(self, X):
        return tuple(t.cpu().numpy() for t in self._predict_torch(self._as_tensor(X)))

    @property
    def noise_variance_(self) -> float:
        self._check_fitted()
        return float(self.likelihood_.noise.detach()) * self._y_scale ** 2 * self.variance_scale

    # -- persistence -------------------------------------------------------------------------------
    def _fitted_state(self) -> dict:
        state = {"model": {k: v.cpu() for k, v in self.model_.state_dict().items()},
                 "likelihood": {k: v.cpu() for k, v in self.likelihood_.state_dict().items()},
                 "n_iter": self.n_iter_}
        if self.keeps_training_data:
            state["train_X"] = self.model_.train_inputs[0].cpu()
            state["train_y"] = self.model_.train_targets.cpu()
        else:
            state["inducing_shape"] = self.model_.inducing_shape()
        return state

    def _restore(self, state: dict):
        if self.keeps_training_data:
            self.build(state["train_X"].to(self.device), state["train_y"].to(self.device))
        else:  # shapes only: the state overwrites the values
            Xt = torch.zeros(state["inducing_shape"][0], self.n_features_in_, device=self.device,
                             dtype=self._torch_dtype())
            self.build(Xt, torch.zeros(len(Xt), device=self.device, dtype=self._torch_dtype()))
        self.model_.load_state_dict(state["model"])
        self.likelihood_.load_state_dict(state["likelihood"])
        self._modules().eval()
        self.n_iter_ = state["n_iter"]


class ExactGPScheme(GPyTorchRegressor):
    """Exact GP inference (GPyTorch ExactGP, CG + LOVE), trained on the full-batch marginal likelihood."""

    def _memory_columns(self, n: int) -> int:
        return n

    def _gp_model(self, Xt, yt, feature, covar):
        return _ExactModel(Xt, yt, self.likelihood_, covar, feature)

    def full_batch_step(self, optimizer):
        """One Adam step on −log p(y) over the built model's training data; returns the loss (NaN on a break-down).

        GPyTorch's float32 pivoted-Cholesky preconditioner can turn the loss into NaN when the kernel is nearly
        low-rank (DKL's first steps on pol); such a step is redone without the preconditioner.
        """
        mll = gpytorch.mlls.ExactMarginalLogLikelihood(self.likelihood_, self.model_)
        Xt, yt = self.model_.train_inputs[0], self.model_.train_targets
        for precondition in (True, False):
            optimizer.zero_grad(set_to_none=True)
            with contextlib.nullcontext() if precondition else gpytorch.settings.max_preconditioner_size(0):
                try:
                    loss = -mll(self.model_(Xt), yt)
                except NUMERICAL_ERRORS:
                    continue
                if torch.isfinite(loss):
                    loss.backward()
                    optimizer.step()
                    self.unpreconditioned_steps_ += not precondition
                    return loss.item()
        return math.nan  # a break-down either way: training stops and restores the last checked state

    def _training_loop(self, Xt, yt, optimizer, validate):
        modules = self._modules()
        modules.train()
        self.unpreconditioned_steps_ = 0
        return train(modules, lambda: self.full_batch_step(optimizer), self.max_iter, validate,
                     eval_every=self.eval_every or 100, patience=self.patience or PATIENCE_STEPS, verbose=self.verbose,
                     desc=type(self).__name__, max_seconds=self.max_time,
                     checkpoint=self._checkpoint(optimizer, Xt, yt))


class SGPRScheme(ExactGPScheme):
    """Titsias' collapsed sparse bound (GPyTorch InducingPointKernel), learned inducing points."""

    def _memory_columns(self, n: int) -> int:
        return self.num_inducing

    def _gp_model(self, Xt, yt, feature, covar):
        covar = InducingPointKernel(covar, self._initial_inducing(Xt, feature), self.likelihood_)
        return _ExactModel(Xt, yt, self.likelihood_, covar, feature)


class SVGPScheme(GPyTorchRegressor):
    """Stochastic variational GP (Hensman et al.): mini-batch ELBO, learned inducing points."""

    keeps_training_data = False

    def _memory_columns(self, n: int) -> int:
        return self.num_inducing

    def _gp_model(self, Xt, yt, feature, covar):
        return _SVGPModel(self._initial_inducing(Xt, feature), covar, feature)

    def supports_distributed(self) -> bool:
        """Data parallel, as SVDBK: every worker takes as many full batches from its own rows, gradients averaged;
        the inducing points start at rank 0's."""
        return True

    def _training_loop(self, Xt, yt, optimizer, validate):
        n_local, n = len(yt), distributed.total_count(len(yt))
        mll = gpytorch.mlls.VariationalELBO(self.likelihood_, self.model_.gp, num_data=n)
        gen = torch.Generator().manual_seed(self.seed)
        modules = self._modules()
        modules.train()
        shared = distributed.data_parallel(n_local, self.batch_size, modules.parameters())

        def batch_loss(idx):
            try:
                return -mll(self.model_(Xt[idx]), yt[idx])
            except NUMERICAL_ERRORS:
                return torch.tensor(math.nan)

        def epoch():
            return minibatch_epoch(batch_loss, n_local, self.batch_size, gen, optimizer, **shared)

        steps = shared.get("n_batches") or steps_per_epoch(n_local, self.batch_size)  # the same on every worker
        patience = self.patience or max(PATIENCE_EPOCHS, math.ceil(PATIENCE_STEPS / steps))
        return train(modules, epoch, self.max_epochs, validate, eval_every=self.eval_every or 10,
                     patience=patience, verbose=self.verbose, desc=type(self).__name__, unit="epoch",
                     max_seconds=self.max_time, checkpoint=self._checkpoint(optimizer, Xt, yt, None, gen))


@register
class ExactGPRegressor(ExactGPScheme):
    """Exact GP, RBF-ARD kernel (the DBK paper's "GP")."""


@register
class SGPRRegressor(SGPRScheme):
    """Sparse GP with Titsias' collapsed bound and learned inducing points ("sGP")."""


@register
class SVGPRegressor(SVGPScheme):
    """Stochastic variational GP, mini-batch ELBO, learned inducing points ("SVGP")."""


@register
class DKLRegressor(ExactGPScheme):
    """Deep kernel learning: network → h features → RBF-ARD, exact GP ("DKL")."""
    deep = True


@register
class SparseDKLRegressor(SGPRScheme):
    """DKL with an SGPR (collapsed) posterior, inducing points in feature space ("sDKL")."""
    deep = True


@register
class SVDKLRegressor(SVGPScheme):
    """DKL with an SVGP posterior trained on mini-batches ("SVDKL")."""
    deep = True


@register
class GridSVDKLRegressor(SVDKLRegressor):
    """SV-DKL as the DAK paper runs it (Wilson et al. 2016; GPyTorch's SV-DKL example): the network's
    ``feature_dim`` = P outputs, squashed into (0, 1) by a sigmoid, each the input of its own 1-D GP (``base_kernel``,
    its own scale and lengthscale) with ``num_inducing`` variational inducing values on a fixed grid over [0, 1]
    (``GridInterpolationVariationalStrategy``, KISS-GP; the paper uses 64), the P GPs mixed into one output by
    learned weights (``LMCVariationalStrategy``, one task); trained by the mini-batch ELBO as SVDKL. The paper's extra
    linear map from the network's D_w outputs to P composes with the network's last linear layer into one (the same
    functions for D_w ≥ P), so the network here ends at P."""
    default_feature_dim = 16

    def supports_distributed(self) -> bool:
        """Not tested across processes: one process only."""
        return False

    def _kernel(self, dim: int):
        """One 1-D kernel per network output (a batch of ``dim``), GPyTorch's default lengthscale."""
        return make_kernel(self.base_kernel or self.default_kernel, batch_shape=torch.Size([dim]))

    def _gp_model(self, Xt, yt, feature, covar):
        return _GridAdditiveModel(feature, self.feature_dim or self.default_feature_dim, self.num_inducing, covar)


@register
class GPyTorchDBKRegressor(ExactGPScheme):
    """DBK without correction written in GPyTorch: ExactGP + LinearKernel on r = feature_dim network features.

    For speed comparisons; use ``DBKRegressor`` for modelling.
    """
    deep = True
    default_kernel = "linear"
    default_feature_dim = 128


class _DirichletSVGP(gpytorch.models.ApproximateGP):
    """C independent SVGPs (a batch) sharing inducing inputs: one per Dirichlet-transformed class target."""

    def __init__(self, inducing: torch.Tensor, n_classes: int, kernel: str, ard: bool):
        batch = torch.Size([n_classes])
        q = CholeskyVariationalDistribution(inducing.shape[0], batch_shape=batch)
        super().__init__(VariationalStrategy(self, inducing, q, learn_inducing_locations=True))
        self.mean_module = ConstantMean(batch_shape=batch)
        dim = inducing.shape[1]
        self.covar_module = make_kernel(kernel, dim, ard=ard, lengthscale=math.sqrt(dim), batch_shape=batch)

    def forward(self, z):
        return MultivariateNormal(self.mean_module(z), self.covar_module(z))


@register
class SVGPClassifier(NeuralGPClassifier):
    """FM-GP's "Var" classifier: SVGP per class on Dirichlet-transformed labels (Milios et al. 2018) with their
    fixed heteroscedastic noise, GPyTorch's ``FixedNoiseGaussianLikelihood``; probabilities E[softmax(f/T)]."""

    param_rules = {"num_inducing": POSITIVE_INT, "base_kernel": one_of(*KERNELS), "ard": BOOL, "alpha_eps": POSITIVE,
                   "n_samples": POSITIVE_INT, "lr": POSITIVE, "batch_size": POSITIVE_INT, "max_epochs": POSITIVE_INT,
                   "input_scaling": one_of(*Scaler.KINDS), **COMMON_RULES}

    def __init__(self, num_inducing=200, base_kernel="matern12", ard=False, alpha_eps=0.01, n_samples=256, lr=0.01,
                 batch_size=1024, max_epochs=100, max_time=None, input_scaling="standard", seed=0, device="cpu",
                 verbose=True):
        self.num_inducing = num_inducing
        self.base_kernel = base_kernel
        self.ard = ard
        self.alpha_eps = alpha_eps
        self.n_samples = n_samples
        self.lr = lr
        self.batch_size = batch_size
        self.max_epochs = max_epochs
        self.max_time = max_time
        self.input_scaling = input_scaling
        self.seed = seed
        self.device = device
        self.verbose = verbose

    def _build(self, n_features: int, n_classes: int, inducing=None):
        inducing = torch.zeros(self.num_inducing, n_features) if inducing is None else inducing
        self.model_ = _DirichletSVGP(inducing, n_classes, self.base_kernel, self.ard).to(self.device)
        self.likelihood_ = gpytorch.likelihoods.FixedNoiseGaussianLikelihood(
            noise=torch.ones(n_classes, 1), learn_additional_noise=False).to(self.device)

    def _fit_scaled(self, X, labels, C):
        t = dirichlet_targets(self.alpha_eps)
        onehot = torch.as_tensor(np.eye(C)[labels].T, dtype=torch.float32, device=self.device)  # (C, n)
        targets = t["y_out"] + onehot * (t["y_in"] - t["y_out"])
        noise = t["s_out"] + onehot * (t["s_in"] - t["s_out"])
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            Xt = self._tensor(X)
            gen = torch.Generator().manual_seed(self.seed)
            idx = torch.randperm(len(Xt), generator=gen)[:self.num_inducing]
            self._build(X.shape[1], C, Xt[idx].clone())
            with torch.no_grad():
                self.model_.mean_module.constant.copy_(targets.mean(1))
            mll = gpytorch.mlls.VariationalELBO(self.likelihood_, self.model_, num_data=len(labels))
            opt = torch.optim.Adam(self.model_.parameters(), lr=self.lr)
            self.model_.train()

            def batch_loss(i):
                try:
                    return -mll(self.model_(Xt[i]), targets[:, i], noise=noise[:, i]).sum()
                except NUMERICAL_ERRORS:
                    return torch.tensor(math.nan)

            self.train_log_ = train(self.model_, lambda: minibatch_epoch(batch_loss, len(labels), self.batch_size,
                                                                         gen, opt),
                                    self.max_epochs, None, eval_every=1, verbose=self.verbose, desc="SVGP-Dirichlet",
                                    unit="epoch", max_seconds=self.max_time)
        self.model_.eval()
        self.n_iter_ = self.train_log_.steps

    def _latent_samples(self, Xs) -> torch.Tensor:
        with torch.no_grad():
            f = self.model_(self._tensor(Xs))
            mean, var = f.mean.T.double(), f.variance.clamp_min(0).T.double()  # (m, C); float64 probabilities
        return softmax_samples(mean, var, self.n_samples, self.seed)

    def _fitted_state(self) -> dict:
        return {"model": {k: v.cpu() for k, v in self.model_.state_dict().items()}, "n_iter": self.n_iter_}

    def _restore(self, state: dict):
        self._build(self.n_features_in_, len(self.classes_))
        self.model_.load_state_dict(state["model"])
        self.model_.eval()
        self.n_iter_ = state["n_iter"]


class _MulticlassSVGP(gpytorch.models.ApproximateGP):
    """C independent SVGPs (a batch) with their own inducing inputs, as one (n, C) multitask output."""

    def __init__(self, inducing: torch.Tensor, n_classes: int, covar):
        batch = torch.Size([n_classes])
        q = CholeskyVariationalDistribution(inducing.shape[-2], batch_shape=batch)
        base = VariationalStrategy(self, inducing.expand(n_classes, *inducing.shape).clone(), q,
                                   learn_inducing_locations=True)
        super().__init__(IndependentMultitaskVariationalStrategy(base, num_tasks=n_classes))
        self.mean_module = ZeroMean(batch_shape=batch)
        self.covar_module = covar

    def forward(self, z):
        return MultivariateNormal(self.mean_module(z), self.covar_module(z))


@register
class SVDKLClassifier(NeuralGPClassifier):
    """"NN+SVGP" of the DAK paper's classification table: DAK's feature network (an MLP D → ``hidden`` →
    ``embedding_dim``, or the small image CNN to ``embedding_dim``) → one SVGP per class on its outputs (RBF-ARD,
    ``num_inducing`` learned inducing points started at random training rows' features) → GPyTorch's
    ``SoftmaxLikelihood``, trained jointly by the mini-batch ELBO (GPyTorch's multi-class SVGP recipe). Adam at
    ``lr`` for the network (weight decay on its weight matrices) and ``gp_lr`` for the GP and likelihood;
    probabilities E[softmax(f/T)] over draws of f's marginals."""

    param_rules = {"backbone": one_of("mlp", "cnn"), "hidden": int_tuple(0), "embedding_dim": POSITIVE_INT,
                   "activation": one_of(*ACTIVATIONS), "num_inducing": POSITIVE_INT, "n_samples": POSITIVE_INT,
                   "lr": POSITIVE, "gp_lr": POSITIVE, "weight_decay": NON_NEGATIVE, "batch_size": POSITIVE_INT,
                   "max_epochs": POSITIVE_INT, "input_scaling": one_of(*Scaler.KINDS), **COMMON_RULES}

    def __init__(self, backbone="mlp", hidden=(64, 32), embedding_dim=64, activation="relu", num_inducing=64,
                 n_samples=256, lr=1e-3, gp_lr=1e-2, weight_decay=0.0, batch_size=512, max_epochs=100,
                 max_time=None, input_scaling="standard", seed=0, device="cpu", verbose=True):
        self.backbone = backbone
        self.hidden = hidden
        self.embedding_dim = embedding_dim
        self.activation = activation
        self.num_inducing = num_inducing
        self.n_samples = n_samples
        self.lr = lr
        self.gp_lr = gp_lr
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.max_epochs = max_epochs
        self.max_time = max_time
        self.input_scaling = input_scaling
        self.seed = seed
        self.device = device
        self.verbose = verbose

    def _build(self, n_features: int, n_classes: int, Xt=None):
        D = int(self.embedding_dim)
        self.net_ = extractor(self.backbone, n_features, D, self.hidden, self.activation).to(self.device)
        if Xt is None:  # restoring: the saved state replaces these
            inducing = torch.zeros(self.num_inducing, D)
        else:
            idx = torch.randperm(len(Xt), generator=torch.Generator().manual_seed(self.seed))[:self.num_inducing]
            with torch.no_grad():
                inducing = self.net_(Xt[idx]).clone()
        covar = make_kernel("rbf", D, ard=True, lengthscale=math.sqrt(D), batch_shape=torch.Size([n_classes]))
        self.gp_ = _MulticlassSVGP(inducing, n_classes, covar).to(self.device)
        self.likelihood_ = gpytorch.likelihoods.SoftmaxLikelihood(num_classes=n_classes,
                                                                  mixing_weights=False).to(self.device)

    def _forward(self, Xt):
        return self.gp_(self.net_(Xt))

    def _fit_scaled(self, X, labels, C):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            Xt, yt = self._tensor(X), torch.as_tensor(labels, device=self.device)
            self._build(X.shape[1], C, Xt)
            modules = nn.ModuleDict({"net": self.net_, "gp": self.gp_, "likelihood": self.likelihood_})
            opt = adam(modules, self.net_, self.lr, self.weight_decay, own_lr={"gp": self.gp_lr,
                                                                               "likelihood": self.gp_lr})
            mll = gpytorch.mlls.VariationalELBO(self.likelihood_, self.gp_, num_data=len(yt))
            gen = torch.Generator().manual_seed(self.seed)
            modules.train()

            def batch_loss(idx):
                try:
                    return -mll(self._forward(Xt[idx]), yt[idx])
                except NUMERICAL_ERRORS:
                    return torch.tensor(math.nan)

            self.train_log_ = train(modules, lambda: minibatch_epoch(batch_loss, len(yt), int(self.batch_size), gen,
                                                                     opt, min_batch=2),
                                    self.max_epochs, None, eval_every=self.max_epochs, verbose=self.verbose,
                                    desc="SVDKL classifier", unit="epoch", max_seconds=self.max_time)
        modules.eval()
        self.n_iter_ = self.train_log_.steps

    def _latent_samples(self, Xs) -> torch.Tensor:
        with torch.no_grad():
            f = self._forward(self._tensor(Xs))
            mean, var = f.mean.double(), f.variance.clamp_min(0).double()  # (m, C); float64 probabilities
        return softmax_samples(mean, var, self.n_samples, self.seed)

    def _fitted_state(self) -> dict:
        return {name: {k: v.cpu() for k, v in getattr(self, name).state_dict().items()}
                for name in ("net_", "gp_", "likelihood_")} | {"n_iter": self.n_iter_}

    def _restore(self, state: dict):
        self._build(self.n_features_in_, len(self.classes_))
        for name in ("net_", "gp_", "likelihood_"):
            getattr(self, name).load_state_dict(state[name])
            getattr(self, name).eval()
        self.n_iter_ = state["n_iter"]

"""The two-stage variance model: a zero-mean exact GP (GPyTorch, a registry kernel with one lengthscale — or one per
input with ``ard``, which the kernel-ridge mean's ARD candidates use —, Gaussian noise) fitted to the residuals,
its hyper-parameters warm-started on a random subsample (the paper's §4 and Algorithm 7, lines 5–6: 100 AdamW steps
at lr 0.1 on m points, then 10 on all, cosine annealing with warm restarts, the loss GPyTorch's marginal likelihood
per point). float64 and Cholesky throughout: no CG, reproducible."""

from __future__ import annotations

import time

import gpytorch
import numpy as np
import torch

from neuralgp.kernels import make_kernel, predicting

SUBSAMPLE_STEPS, SUBSAMPLE_LR = 100, 0.1
FULL_STEPS, FULL_LR = 10, 0.1
CHOLESKY_ALWAYS = 10 ** 9  # gpytorch.settings.max_cholesky_size: never switch to conjugate gradients


class ZeroMeanGP(gpytorch.models.ExactGP):
    def __init__(self, X, y, likelihood, kernel: str, ard: bool = False, lengthscale: float | None = None):
        super().__init__(X, y, likelihood)
        self.covar_module = make_kernel(kernel, dim=X.shape[-1], ard=ard, lengthscale=lengthscale)

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device),
                                                         self.covar_module(x))


def _optimise(model, likelihood, steps: int, lr: float) -> list[float]:
    model.train(), likelihood.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
    params = list(model.parameters())  # the likelihood's noise is a submodule of the ExactGP
    opt = torch.optim.AdamW(params, lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=max(1, steps))
    losses = []
    with gpytorch.settings.max_cholesky_size(CHOLESKY_ALWAYS):
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            loss = -mll(model(*model.train_inputs), model.train_targets)
            loss.backward()
            opt.step()
            schedule.step()
            losses.append(loss.item())
    return losses


def _synchronise(device) -> None:
    if torch.device(device).type == "cuda":  # the clock must not stop before the device's queued work has run
        torch.cuda.synchronize(device)


def fit_variance_gp(X, r, kernel: str, warm_start: int | None = 200, seed: int = 0,
                    subsample_steps: int = SUBSAMPLE_STEPS, full_steps: int = FULL_STEPS, device="cpu",
                    ard: bool = False, lengthscale: float | None = None):
    """Fit the zero-mean GP to residuals r on ``device``. ``warm_start`` = m: ``subsample_steps`` on m random
    rows, then ``full_steps`` on all; None (or m ≥ n): ``subsample_steps`` on all rows (full training). ``ard``:
    one lengthscale per input; ``lengthscale``: their start (GPyTorch's default otherwise). Returns
    the model (with all rows as its training data, on ``device``) and a log {"subsample_s", "full_s", "losses"}."""
    X = torch.as_tensor(np.asarray(X, dtype=np.float64), device=device)
    r = torch.as_tensor(np.asarray(r, dtype=np.float64), device=device)
    n = len(r)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        likelihood = gpytorch.likelihoods.GaussianLikelihood().to(device=device, dtype=torch.float64)
        log = {"subsample_s": 0.0, "full_s": 0.0, "losses": []}
        if warm_start is not None and warm_start < n:
            rows = torch.as_tensor(np.random.default_rng(seed).choice(n, warm_start, replace=False), device=device)
            model = ZeroMeanGP(X[rows], r[rows], likelihood, kernel, ard, lengthscale).to(device=device,
                                                                                          dtype=torch.float64)
            t = time.perf_counter()
            log["losses"] += _optimise(model, likelihood, subsample_steps, SUBSAMPLE_LR)
            _synchronise(device)
            log["subsample_s"] = time.perf_counter() - t
            model.set_train_data(X, r, strict=False)
            steps, lr = full_steps, FULL_LR
        else:
            model = ZeroMeanGP(X, r, likelihood, kernel, ard, lengthscale).to(device=device, dtype=torch.float64)
            steps, lr = subsample_steps, SUBSAMPLE_LR
        t = time.perf_counter()
        log["losses"] += _optimise(model, likelihood, steps, lr)
        _synchronise(device)
        log["full_s"] = time.perf_counter() - t
    model.eval(), likelihood.eval()
    return model, log


def predictive_variance(model, X) -> tuple[np.ndarray, np.ndarray, float]:
    """(posterior mean of f, variance of f at X, noise σ²); the variance does not depend on the targets' values."""
    X = torch.as_tensor(np.asarray(X, dtype=np.float64), device=model.train_inputs[0].device)
    with (torch.no_grad(), gpytorch.settings.max_cholesky_size(CHOLESKY_ALWAYS),
          gpytorch.settings.fast_pred_var(False), predicting()):
        f = model(X)
        mean, var_f = f.mean.cpu().numpy(), f.variance.clamp_min(0.0).cpu().numpy()
    return mean, var_f, float(model.likelihood.noise.detach())


def leave_one_out(model) -> tuple[np.ndarray, np.ndarray]:
    """Each training row's leave-one-out predictive mean and variance of y under the fitted GP, in closed form from
    one Cholesky factor (Rasmussen & Williams 2006, eq. 5.12): μ₋ᵢ = rᵢ − [K⁻¹r]ᵢ / [K⁻¹]ᵢᵢ, σ²₋ᵢ = 1 / [K⁻¹]ᵢᵢ
    with K = K_f + σ²I."""
    X, r = model.train_inputs[0], model.train_targets
    with torch.no_grad():
        K = model.covar_module(X).to_dense()
        K = K + model.likelihood.noise.detach() * torch.eye(len(r), dtype=K.dtype, device=K.device)
        K_inv = torch.cholesky_inverse(torch.linalg.cholesky(K))
        d = torch.diagonal(K_inv)
        mean, var = r - (K_inv @ r) / d, 1.0 / d
    return mean.cpu().numpy(), var.cpu().numpy()

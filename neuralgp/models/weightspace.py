"""What the weight-space GP estimators share (DBK, DAK): a module mapping X to features Φ with a learned noise σ²
(and, for variational inference, q(w)), trained either full batch by the exact marginal likelihood or on
mini-batches by an ELBO, early-stopped on the validation part, predicting through the posterior engine."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from neuralgp import distributed
from neuralgp.chunking import EXACT_TRAIN_ROWS, gradient_block_rows, map_rows
from neuralgp.errors import InputError
from neuralgp.models.base import NeuralGPRegressor
from neuralgp.posterior import ExactPosterior, GaussianLikelihood, elbo, make_weight_posterior, stream_stats
from neuralgp.posterior.correction import correction_scale, trace_penalty
from neuralgp.posterior.objectives import blockwise_exact_backward, chunked_exact_backward
from neuralgp.posterior.positive import Positive
from neuralgp.train import adam, compiled, minibatch_epoch, steps_per_epoch, train

SVI_MIN_BATCH = 2  # a batch of one has no trace term: mini-batch training skips it


class WeightSpaceModule(nn.Module):
    """Feature map ``net`` (X → Φ with ``rank`` columns), noise σ² (``noise()``, above ``noise_min``) and, for
    variational inference, q(w) of the given family (``q_init``: its initial state, by default the prior)."""

    def __init__(self, net: nn.Module, rank: int, noise_init: float, noise_min: float, svi: bool, family: str,
                 **q_init):
        super().__init__()
        self.net = net
        self.noise = Positive(noise_init, floor=noise_min, names=("noise_init", "noise_min"))
        self.q = make_weight_posterior(family, rank, **q_init) if svi else None

    def forward(self, x):
        return self.net(x)


class WeightSpaceRegressor(NeuralGPRegressor):
    """Subclasses give ``build_module(in_dim)`` and say whether inference is exact (``_is_exact``); they may
    replace the mini-batch objective (``_svi_objective``) and switch on DBK's variance correction
    (``uses_variance_correction``). The parameters read here (lr, weight_decay, batch_size, max_iter,
    max_epochs, eval_every, patience, max_time, noise_init, noise_min, recalibration, seed, device, verbose) are
    every subclass's, as are ``checkpoint`` and ``checkpoint_every`` (``SavedModel._checkpoint``)."""

    chunk_size = EXACT_TRAIN_ROWS
    noise_lr = None
    training_gram_precision = "mixed"
    name = "weight-space GP"  # progress bars

    def _is_exact(self) -> bool:
        raise NotImplementedError

    def uses_variance_correction(self) -> bool:
        return False

    def trains_trace_regulariser(self) -> bool:
        return False

    def recalibrates_on_validation(self) -> bool:
        return bool(self.recalibration)

    def _refit_budget(self, trained_rows, rows):
        """``max_iter`` (exact) or ``max_epochs`` (mini-batch) at the step early stopping kept. Mini-batch epochs are
        steps times ⌈rows / batch_size⌉: given the rows this model trained on (``trained_rows``) and those the clone
        will (``rows``), its epochs are rescaled to the same number of optimiser steps — on half the rows, the kept
        epochs alone would be half the training."""
        if self._is_exact():
            return {"max_iter": self.train_log_.best_step}
        epochs = self.train_log_.best_step
        if trained_rows and rows:
            steps = lambda n: steps_per_epoch(n, int(self.batch_size), min(SVI_MIN_BATCH, n))  # noqa: E731
            epochs = round(epochs * steps(trained_rows) / steps(rows))
        return {"max_epochs": epochs}

    def supports_distributed(self) -> bool:
        """Trains across the workers of a process group, each fitting on its own rows (``neuralgp.distributed``):
        exact inference by summed statistics and gradients, mini-batch inference data-parallel."""
        return True

    # -- fitting ---------------------------------------------------------------------------------
    def _fit_scaled(self, X, y, X_val, y_val):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.module_ = self.build_module(X.shape[1])
            Xt, yt = self._tensor(X, device=self.device), self._tensor(y, torch.float64, self.device)
            val = None
            if X_val is not None:
                val = (self._tensor(X_val, device=self.device), y_val)
            self._prepare(Xt, yt)
            fit = self._fit_exact if self._is_exact() else self._fit_svi
            self.train_log_ = fit(Xt, yt, val)
        self._cache_posterior(self._in_memory(Xt, yt))
        self.n_iter_ = self.train_log_.steps
        return self

    def _prepare(self, Xt, yt):
        """Work before the main training (DAK's pre-training when fine-tuning); none by default."""

    def _optimizer(self):
        return adam(self.module_, self.module_.net, self.lr, self.weight_decay,
                    {"noise": self.noise_lr} if self.noise_lr else None)

    def _fit_exact(self, Xt, yt, val):
        m, opt, precision = self.module_, self._optimizer(), self.training_gram_precision
        n = distributed.total_count(len(yt))
        chunked = self.chunk_size is not None and len(yt) > self.chunk_size

        block = gradient_block_rows(n)

        def step():
            opt.zero_grad(set_to_none=True)
            if chunked:  # same gradient, O(chunk·r) memory, one extra forward pass
                loss = chunked_exact_backward(m, Xt, yt, self.trains_trace_regulariser(), self.chunk_size, precision)
                distributed.sum_gradients(m.net.parameters())  # σ²'s gradient is already the same on every worker
            else:  # the network's gradient summed over row blocks and workers in float64
                loss = blockwise_exact_backward(m, Xt, yt, self.trains_trace_regulariser(), block, precision)
            opt.step()
            return loss

        validate = None
        if val is not None:
            def validate():
                posterior, max_var = self._exact_posterior(self._in_memory(Xt, yt))
                recalibrated = bool(self.recalibration)
                return self._validation_nll(val, lambda X: self._predict_torch(X, posterior, max_var),
                                           recalibrated, keep_points=recalibrated)
        return train(m, step, self.max_iter, validate, eval_every=self.eval_every or 25,
                     patience=self.patience or 2000, verbose=self.verbose, desc=f"{self.name} exact", unit="it",
                     max_seconds=self.max_time, checkpoint=self._checkpoint(opt, Xt, yt, val))

    def _svi_objective(self, Xb: torch.Tensor, yb: torch.Tensor, n: int) -> torch.Tensor:
        """Mini-batch ELBO (DBK eq. 9), minus the scaled trace regulariser when it is trained."""
        m = self.module_
        phi, noise = m(Xb), m.noise()
        objective = elbo(phi, yb, m.q, GaussianLikelihood(noise), n_total=n)
        if self.trains_trace_regulariser():
            objective = objective - (n / len(yb)) * trace_penalty(phi, noise)
        return objective

    def _fit_svi(self, Xt, yt, val):
        m, opt = self.module_, self._optimizer()
        n_local, n, batch = len(yt), distributed.total_count(len(yt)), int(self.batch_size)
        gen = torch.Generator().manual_seed(self.seed)
        shared = distributed.data_parallel(n_local, batch, m.parameters())  # {} in one process

        batch_loss = compiled(lambda idx: -self._svi_objective(Xt[idx], yt[idx], n) / n, opt, self.compile)

        def epoch():  # a last batch under SVI_MIN_BATCH joins the next permutation
            return minibatch_epoch(batch_loss, n_local, batch, gen, opt, min_batch=min(SVI_MIN_BATCH, n_local),
                                   **shared)

        validate = None
        if val is not None:
            def validate():
                max_var = self._max_prior_variance(self._in_memory(Xt, yt))
                recalibrated = bool(self.recalibration)
                return self._validation_nll(val, lambda X: self._predict_torch(X, m.q, max_var), recalibrated,
                                            keep_points=recalibrated)
        return train(m, epoch, self.max_epochs, validate, eval_every=self.eval_every or 10,
                     patience=self.patience or 200, verbose=self.verbose, desc=f"{self.name} svi", unit="epoch",
                     max_seconds=self.max_time, checkpoint=self._checkpoint(opt, Xt, yt, val, gen))

    # -- posterior ---------------------------------------------------------------------------------
    def _max_prior_variance(self, chunks) -> torch.Tensor | None:
        """M_X = max_j ‖φ(x_j)‖² over every training row (None without the variance correction)."""
        if not self.uses_variance_correction():
            return None
        top = torch.tensor(-math.inf, dtype=torch.float64, device=self.device)
        with torch.no_grad():
            for X, _ in chunks():
                top = torch.maximum(top, (self.module_(X).double() ** 2).sum(-1).max())
        return distributed.maximum(top)

    def _exact_posterior(self, chunks):
        """N(w | all rows) with the current feature map and σ²: DBK's M_X in one pass, the statistics in another."""
        m = self.module_
        with torch.no_grad():
            noise = m.noise().detach()
            max_var = self._max_prior_variance(chunks)
            scale_fn = None if max_var is None else (lambda phi: correction_scale(phi, noise, max_var))
            stats = distributed.reduce_stats(stream_stats(m, chunks(), scale_fn))
            return ExactPosterior(stats, noise), max_var

    def _cache_posterior(self, chunks):
        self.module_.eval()
        if self._is_exact():
            self.posterior_, self.max_prior_variance_scaled_ = self._exact_posterior(chunks)
        else:
            self.posterior_, self.max_prior_variance_scaled_ = self.module_.q, self._max_prior_variance(chunks)

    def conditions_on_rows(self) -> bool:
        return self._is_exact()

    def _condition(self, chunks):
        self._cache_posterior(chunks)

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
        if getattr(self, "members_", None):
            raise InputError("a bag predicts from its members' kernels, not this fit's: use members_[i].features(X), "
                             "or fit with bagging=0")
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
        if self._is_exact():
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
        if self._is_exact():
            self.posterior_ = ExactPosterior.from_factor(state["chol"].to(self.device),
                                                         state["weights_mean"].to(self.device),
                                                         self.module_.noise().detach())
        else:
            self.posterior_ = self.module_.q

"""Variational weight-space posterior q(w) = N(m, S) and its ELBO (DBK paper eqs. 8–10).

Two families: full-rank S = LLᵀ (L lower triangular, positive diagonal) and mean-field
S = diag(s²). For a Gaussian likelihood the expected log-likelihood is closed form; other
likelihoods (Poisson, Appendix A.5) provide their own ``expected_log_prob``.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.functional import softplus

from neuralgp.posterior.likelihoods import GaussianLikelihood
from neuralgp.posterior.positive import inverse_softplus
from neuralgp.posterior.sparse import SparseRows


def is_rows(phi) -> bool:
    """Φ given by its non-zeros (``SparseRows`` or a feature map's own rows object with the same methods: ``matvec``,
    ``squared_matvec``, ``moments``, ``dense``) rather than as a dense tensor."""
    return not isinstance(phi, torch.Tensor)


class _WeightPosterior(nn.Module):
    """Common parts: the mean m, the KL to N(0, I) and the predictive moments of f = wᵀφ. With ``outputs`` = C,
    w is a (C, r) matrix of independent per-output weights (one latent function per class)."""

    def __init__(self, rank: int, outputs: int | None = None):
        super().__init__()
        self.mean = nn.Parameter(torch.zeros(rank if outputs is None else (outputs, rank)))

    def kl_divergence(self) -> torch.Tensor:
        """KL(N(m, S) ‖ N(0, I)) = ½(‖m‖² + tr S − log|S| − r)."""
        m = self.mean
        return 0.5 * ((m ** 2).sum() + self.trace_cov() - self.logdet_cov() - m.numel())

    def predict_f(self, phi: torch.Tensor | SparseRows):
        """Mean and variance of f(x) = wᵀφ(x) under q (eq. 10 without noise)."""
        if is_rows(phi):
            return phi.matvec(self.mean), self.quadratic_form(phi)
        phi = phi.to(self.mean.dtype)
        return self.mean @ phi.T, self.quadratic_form(phi)

    def sample_f(self, phi: torch.Tensor | SparseRows, n_samples: int) -> torch.Tensor:
        """(n_samples, n) — or (n_samples, C, n) with C outputs — draws of f = Φw, w ~ q reparameterised (one w per
        sample, shared by the rows)."""
        w = self.sample_weights(n_samples)
        return phi.matvec(w) if is_rows(phi) else w @ phi.to(w.dtype).T


class FullRankPosterior(_WeightPosterior):
    """q(w) = N(m, LLᵀ), L lower triangular with a softplus-positive diagonal; initialised at the prior."""

    def __init__(self, rank: int):
        super().__init__(rank)
        self.raw_tril = nn.Parameter(torch.zeros(rank, rank))
        self.raw_diag = nn.Parameter(torch.full((rank,), inverse_softplus(1.0)))

    def scale_tril(self) -> torch.Tensor:
        return torch.tril(self.raw_tril, diagonal=-1) + torch.diag(softplus(self.raw_diag))

    def set(self, mean: torch.Tensor, scale_tril: torch.Tensor) -> None:
        """Set q to N(mean, scale_tril scale_trilᵀ) (e.g. the exact posterior, for tests)."""
        with torch.no_grad():
            self.mean.copy_(mean)
            self.raw_tril.copy_(torch.tril(scale_tril, diagonal=-1))
            diag = torch.diagonal(scale_tril)
            self.raw_diag.copy_(diag + torch.log(-torch.expm1(-diag)))

    def trace_cov(self):
        return (self.scale_tril() ** 2).sum()

    def logdet_cov(self):
        return 2.0 * torch.log(softplus(self.raw_diag)).sum()

    def quadratic_form(self, phi):
        """‖Lᵀφ_i‖² for each row φ_i."""
        phi = phi.dense() if is_rows(phi) else phi
        return ((phi.to(self.mean.dtype) @ self.scale_tril()) ** 2).sum(-1)

    def sample_weights(self, n_samples: int) -> torch.Tensor:
        eps = torch.randn(n_samples, self.mean.numel(), dtype=self.mean.dtype, device=self.mean.device)
        return self.mean + eps @ self.scale_tril().T


class MeanFieldPosterior(_WeightPosterior):
    """q(w) = N(m, diag(s²)), s softplus-positive; initialised at m = 0 and s = ``init_std`` (1: the prior)."""

    def __init__(self, rank: int, init_std: float = 1.0, outputs: int | None = None):
        super().__init__(rank, outputs)
        self.raw_std = nn.Parameter(torch.full(self.mean.shape, inverse_softplus(init_std)))

    def std(self):
        return softplus(self.raw_std)

    def trace_cov(self):
        return (self.std() ** 2).sum()

    def logdet_cov(self):
        return 2.0 * torch.log(self.std()).sum()

    def predict_f(self, phi: torch.Tensor | SparseRows):
        if is_rows(phi):
            return phi.moments(self.mean, self.std() ** 2)
        return super().predict_f(phi)

    def quadratic_form(self, phi):
        if is_rows(phi):
            return phi.squared_matvec(self.std() ** 2)
        return self.std() ** 2 @ (phi.to(self.mean.dtype) ** 2).T

    def sample_weights(self, n_samples: int) -> torch.Tensor:
        """(n_samples, *m.shape) reparameterised draws of w."""
        eps = torch.randn(n_samples, *self.mean.shape, dtype=self.mean.dtype, device=self.mean.device)
        return self.mean + eps * self.std()


FAMILIES = {"full": FullRankPosterior, "meanfield": MeanFieldPosterior}


def make_weight_posterior(family: str, rank: int, **init) -> _WeightPosterior:
    if family not in FAMILIES:
        raise ValueError(f"unknown variational family {family!r}; use one of {sorted(FAMILIES)}")
    return FAMILIES[family](rank, **init)


def elbo(phi: torch.Tensor, y: torch.Tensor, q: _WeightPosterior, likelihood=None,
         n_total: int | None = None) -> torch.Tensor:
    """Mini-batch ELBO estimator (eq. 9): (n/b) Σ_batch E_q[log p(y_i | f_i)] − KL(q ‖ p).

    With the full data (b = n) and a Gaussian likelihood this is eq. (8).
    """
    likelihood = likelihood or GaussianLikelihood(torch.tensor(1.0))
    mean, var = q.predict_f(phi)
    n = phi.shape[0] if n_total is None else n_total
    data_term = likelihood.expected_log_prob(y.to(mean.dtype), mean, var).sum()
    return (n / phi.shape[0]) * data_term - q.kl_divergence()


def mc_elbo(phi: torch.Tensor | SparseRows, y: torch.Tensor, q: _WeightPosterior, likelihood, n_samples: int,
            n_total: int | None = None) -> torch.Tensor:
    """``elbo`` with the expected log-likelihood estimated from ``n_samples`` reparameterised draws of w (DAK
    eqs. 40–43): unbiased for the same bound, for likelihoods without a closed form."""
    f = q.sample_f(phi, n_samples)
    n = phi.shape[0] if n_total is None else n_total
    data_term = likelihood.log_prob(y.to(f.dtype), f).mean(0).sum()
    return (n / phi.shape[0]) * data_term - q.kl_divergence()

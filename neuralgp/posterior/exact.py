"""Exact weight-space posterior of f(x) = wᵀφ(x), w ~ N(0, I), y_i ~ N(f(x_i), σ² d_i).

Everything is expressed through the sufficient statistics A = ΦᵀD⁻¹Φ, b = ΦᵀD⁻¹y, c = yᵀD⁻¹y
(D = diag(d) the per-point noise multipliers), so the cost is O(n r²) and the n×n matrix is
never formed (DBK paper eqs. 5, 6, 12 and Appendix A.1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.autograd.function import once_differentiable

from neuralgp.chunking import row_slices

STATS_DTYPE = torch.float64


PRECISIONS = ("float64", "mixed", "float32")
MIXED_BLOCK_ROWS = 256
GRAM_COLUMN_BLOCKS = 4


def _summed_products(left: torch.Tensor, right: torch.Tensor, precision: str) -> torch.Tensor:
    """leftᵀright (a sum over rows) in float64: one product in the inputs' dtype, or, for ``mixed``, products
    over blocks of 256 rows summed in float64 — closer to float64 than one float32 product at about its cost
    (float64 products cost 3–4× on CPUs); the gain grows with n: 3× at 2·10⁴ rows, 12× at 2·10⁵, 80× at 10⁶
    (relative error of ΦᵀΦ, MKL on an Intel CPU); 1000× at 2·10⁵ on an AMD EPYC, where MKL's float32 product
    is far less accurate (2·10⁻⁵)."""
    n = left.shape[0]
    m = n // MIXED_BLOCK_ROWS * MIXED_BLOCK_ROWS if precision == "mixed" else 0
    if m == 0:
        return (left.T @ right).to(STATS_DTYPE)
    blocks = [t[:m].view(-1, MIXED_BLOCK_ROWS, t.shape[1]) for t in (left, right)]
    out = torch.bmm(blocks[0].mT, blocks[1]).sum(0, dtype=STATS_DTYPE)
    return out if m == n else out + (left[m:].T @ right[m:]).to(STATS_DTYPE)


def _gram(phi: torch.Tensor, phi_w: torch.Tensor, precision: str) -> torch.Tensor:
    """phi_wᵀphi = ΦᵀWΦ, symmetric. Below float64 only its lower block-columns are computed
    (``GRAM_COLUMN_BLOCKS`` of them: 10/16 of the full product's flops for 4) and mirrored; in float64
    one product is faster."""
    if precision == "float64":
        return _summed_products(phi_w, phi, precision)
    r = phi.shape[1]
    edges = sorted({r * k // GRAM_COLUMN_BLOCKS for k in range(GRAM_COLUMN_BLOCKS + 1)})
    gram = torch.empty(r, r, dtype=STATS_DTYPE, device=phi.device)
    for a, b in zip(edges[:-1], edges[1:]):
        gram[a:, a:b] = _summed_products(phi_w[:, a:], phi[:, a:b], precision)
    return gram.tril() + gram.tril(-1).T


class _GramStatistics(torch.autograd.Function):
    """A = ΦᵀWΦ and b = ΦᵀWy in float64 at the asked precision, with a backward pass in Φ's dtype.

    The forward accuracy matters (the r×r Cholesky of ΦᵀΦ + σ²I is ill-conditioned when σ² is
    small); the gradient does not need it, and computing it in Φ's dtype (float32 for networks)
    keeps the step close to the cost of the network alone.
    """

    @staticmethod
    def forward(ctx, phi, y, weights, precision):
        ctx.save_for_backward(phi, y, weights)
        # float64 casts Φ and uses y and the weights unrounded: the cached posterior is built this way
        dtype = STATS_DTYPE if precision == "float64" else phi.dtype
        phi, y = phi.to(dtype), y.to(dtype)
        phi_w = phi if weights is None else phi * weights.to(dtype).unsqueeze(-1)
        return _gram(phi, phi_w, precision), _summed_products(y.unsqueeze(-1), phi_w, precision).squeeze(0)

    @staticmethod
    def backward(ctx, grad_A, grad_b):
        phi, y, weights = ctx.saved_tensors
        # ∂/∂Φ of ⟨Ā, ΦᵀWΦ⟩ + ⟨b̄, ΦᵀWy⟩ = W (Φ (Ā + Āᵀ) + y b̄ᵀ)
        grad_phi = (phi @ (grad_A + grad_A.T).to(phi.dtype)).addr_(y.to(phi.dtype), grad_b.to(phi.dtype))
        if weights is not None:
            grad_phi = grad_phi * weights.to(phi.dtype).unsqueeze(-1)
        return grad_phi, None, None, None


class _EvidenceTerms(torch.autograd.Function):
    """T = log|Λ| + (c − bᵀΛ⁻¹b)/σ², Λ = A + γI, from Λ's Cholesky factor, with its closed-form gradient
    ∂T/∂A = Λ⁻¹ + ββᵀ/σ², ∂T/∂b = −2β/σ², ∂T/∂c = 1/σ², ∂T/∂σ² = −(c − bᵀβ)/σ⁴, ∂T/∂γ = tr ∂T/∂A (β = Λ⁻¹b):
    a handful of r×r operations instead of autograd through the Cholesky factorisation."""

    @staticmethod
    def forward(ctx, A, b, c, noise, gamma, chol):
        beta = torch.cholesky_solve(b.unsqueeze(-1), chol).squeeze(-1)
        fit = c - (b * beta).sum(-1)
        ctx.save_for_backward(beta, noise, fit, chol)
        return 2.0 * torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1) + fit / noise

    @staticmethod
    @once_differentiable  # the factor is an input without a graph: no second derivatives
    def backward(ctx, grad):
        beta, noise, fit, chol = ctx.saved_tensors
        d_A = torch.cholesky_inverse(chol) + beta.unsqueeze(-1) * beta.unsqueeze(-2) / noise[..., None, None]
        return (grad[..., None, None] * d_A, -2.0 * grad[..., None] * beta / noise[..., None], grad / noise,
                -grad * fit / noise ** 2, grad * torch.diagonal(d_A, dim1=-2, dim2=-1).sum(-1), None)


@dataclass
class GramStats:
    """Sufficient statistics of a data set under features Φ and noise multipliers d."""

    A: torch.Tensor  # (r, r)  ΦᵀD⁻¹Φ
    b: torch.Tensor  # (r,)    ΦᵀD⁻¹y
    c: torch.Tensor  # ()      yᵀD⁻¹y
    n: int
    logdet_d: torch.Tensor  # () Σ log d_i

    def __add__(self, other: "GramStats") -> "GramStats":
        return GramStats(self.A + other.A, self.b + other.b, self.c + other.c,
                         self.n + other.n, self.logdet_d + other.logdet_d)

    @property
    def rank(self) -> int:
        return self.A.shape[-1]


def gram_stats(phi: torch.Tensor, y: torch.Tensor, noise_scale: torch.Tensor | None = None,
               precision: str = "float64") -> GramStats:
    """Statistics of one block of rows; differentiable in ``phi`` (not in y or noise_scale).

    ``precision`` ("float64", "mixed" or "float32", see ``_gram``) is how the products are summed;
    the result is float64 in every case. "float32" has about 1e-7·√n relative error in ΦᵀΦ: unsafe
    once σ² falls to that level (the small-noise regime of uncorrected DBK); "mixed" 3–80× less (see
    ``_summed_products``).
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if y.requires_grad or (noise_scale is not None and noise_scale.requires_grad):
        raise ValueError("gram_stats differentiates through phi only; detach y and noise_scale")
    weights = None if noise_scale is None else 1.0 / noise_scale
    A, b = _GramStatistics.apply(phi, y, weights, precision)
    y = y.to(STATS_DTYPE)
    c = (y * y).sum() if weights is None else (y * y * weights.to(STATS_DTYPE)).sum()
    if noise_scale is None:
        logdet_d = torch.zeros((), dtype=STATS_DTYPE, device=phi.device)
    else:
        logdet_d = torch.log(noise_scale.to(STATS_DTYPE)).sum()
    return GramStats(A, b, c, phi.shape[0], logdet_d)


def accumulate_stats(feature_fn, X: torch.Tensor, y: torch.Tensor, noise_scale_fn=None,
                     chunk_size: int | None = None, stats_fn=gram_stats) -> GramStats:
    """``stream_stats`` over consecutive row chunks of the tensors X, y (``chunk_size`` rows each)."""
    return stream_stats(feature_fn, ((X[rows], y[rows]) for rows in row_slices(X.shape[0], chunk_size)),
                        noise_scale_fn, stats_fn)


def stream_stats(feature_fn, chunks, noise_scale_fn=None, stats_fn=gram_stats) -> GramStats:
    """Sum ``stats_fn`` over (X, y) chunks in float64 without keeping any graph: O(chunk·r) memory, whatever the
    number of chunks (an in-memory data set, or rows streamed from disk: ``neuralgp.datasets.rows``).

    ``feature_fn(X_chunk) -> Φ_chunk``; ``noise_scale_fn(Φ_chunk) -> d_chunk`` (optional);
    ``stats_fn(Φ_chunk, y_chunk[, d_chunk])`` is ``gram_stats`` or another statistic that sums with ``+``.
    """
    total = None
    with torch.no_grad():
        for X, y in chunks:
            phi = feature_fn(X)
            scale = () if noise_scale_fn is None else (noise_scale_fn(phi),)
            part = stats_fn(phi, y, *scale)
            total = part if total is None else total + part
    return total


class ExactPosterior:
    """Posterior of w for y = Φw + ε, w ~ N(0, σ_f² I), ε ~ N(0, σ²D): N(Λ⁻¹b, σ²Λ⁻¹) with Λ = A + γI, γ = σ²/σ_f².

    ``outputscale`` σ_f² defaults to 1 (DBK's w ~ N(0, I)); FM-GP learns it (k = σ_f² ψᵀψ + σ²δ, FM-GP eqs. 3–4).
    Λ is factorised once by Cholesky (the r×r matrix; FM-GP's eigendecomposition gives the same numbers).
    Statistics, noise and scale may carry leading batch dimensions (one regression per class, Dirichlet
    classification): every method then works per batch entry and shares the test features.
    """

    def __init__(self, stats: GramStats, noise: torch.Tensor, outputscale: torch.Tensor | None = None):
        self.stats = stats
        self.noise = torch.as_tensor(noise).to(STATS_DTYPE)
        self.outputscale = None if outputscale is None else torch.as_tensor(outputscale).to(STATS_DTYPE)
        eye = torch.eye(stats.rank, dtype=STATS_DTYPE, device=stats.A.device)
        lam = stats.A + self._gamma()[..., None, None] * eye
        self.chol, info = torch.linalg.cholesky_ex(lam)
        if bool((info != 0).any()):
            raise FloatingPointError(
                "Cholesky of ΦᵀΦ + σ²I failed: the features are numerically degenerate "
                "(non-finite or huge values); lower the learning rate or raise noise_min")

    def _gamma(self) -> torch.Tensor:
        return self.noise if self.outputscale is None else self.noise / self.outputscale

    @classmethod
    def from_factor(cls, chol: torch.Tensor, weights_mean: torch.Tensor, noise: torch.Tensor,
                    outputscale: torch.Tensor | None = None) -> "ExactPosterior":
        """Rebuild a prediction-only posterior from a cached factor (no training data needed)."""
        post = cls.__new__(cls)
        post.stats = None
        post.noise = torch.as_tensor(noise).to(STATS_DTYPE)
        post.outputscale = None if outputscale is None else torch.as_tensor(outputscale).to(STATS_DTYPE)
        post.chol = chol.to(STATS_DTYPE)
        post._mean_w = weights_mean.to(STATS_DTYPE)
        return post

    def recalibrated(self, alpha) -> "ExactPosterior":
        """σ_f² and σ² both times α (FM-GP Algorithm 1): γ, Λ and the mean stay, every variance scales by α."""
        scale = self.outputscale if self.outputscale is not None else torch.ones_like(self.noise)
        return ExactPosterior.from_factor(self.chol, self.weights_mean, self.noise * alpha, scale * alpha)

    @property
    def weights_mean(self) -> torch.Tensor:
        """Posterior mean of w, β = Λ⁻¹ΦᵀD⁻¹y."""
        if not hasattr(self, "_mean_w"):
            self._mean_w = torch.cholesky_solve(self.stats.b.unsqueeze(-1), self.chol).squeeze(-1)
        return self._mean_w

    def log_marginal_likelihood(self) -> torch.Tensor:
        """log N(y; 0, σ_f²ΦΦᵀ + σ²D): DBK eq. (5) / FM-GP §3.4, via Sylvester's determinant identity (any n, r)."""
        s = self.stats
        n, r = s.n, s.rank
        terms = _EvidenceTerms.apply(s.A, s.b, s.c, self.noise, self._gamma(), self.chol.detach())
        return -0.5 * (n * math.log(2 * math.pi) + n * torch.log(self.noise) - r * torch.log(self._gamma())
                       + s.logdet_d + terms)

    def predict_f(self, phi: torch.Tensor):
        """Mean φᵀβ and variance σ²‖L⁻¹φ‖² of f at test features (eq. 6 without noise); shapes (..., m)."""
        phi = phi.to(STATS_DTYPE)
        v = torch.linalg.solve_triangular(self.chol, phi.T.expand(*self.chol.shape[:-2], *phi.T.shape), upper=False)
        return self.weights_mean @ phi.T, self.noise[..., None] * (v ** 2).sum(-2)

    def predict(self, phi: torch.Tensor, noise_scale: torch.Tensor | None = None):
        """Predictive mean, var of f and var of y = var_f + σ²d (eq. 6; eq. 12 with noise_scale = d)."""
        mean, var_f = self.predict_f(phi)
        d = 1.0 if noise_scale is None else noise_scale.to(STATS_DTYPE)
        return mean, var_f, var_f + self.noise[..., None] * d

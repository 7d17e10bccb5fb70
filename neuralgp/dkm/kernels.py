"""Kernels on Gram matrices (the DKM paper's §2.3 and eq. 38): K(G) computed from G alone, for a square Gram or a
cross block (G_ab with the two diagonals), and their exact vector-Jacobian products.

``linear``: K = w₁G. ``sqexp``: K_ij = w₂ exp(−R_ij / 2ℓ²), R_ij = G_ii + G_jj − 2G_ij (eq. 7). ``linear+sqexp``:
their sum (eq. 38, the paper's). ``arccos``: w₂ times Cho & Saul's order-1 (ReLU) arc-cosine kernel,
K_ij = (√(G_ii G_jj − G_ij²) + (π − θ_ij) G_ij)/π with θ_ij = arccos(G_ij/√(G_ii G_jj)) — the paper only names it;
normalised by 1/π (Cho & Saul's), so that K_ii = G_ii (the ReLU network's 1/2π is a factor ½ in w₂); it has no
lengthscale. The weights are per layer and learned; the lengthscale ℓ is fixed (the paper gives none; inputs are
standardised). The VJPs use the all-entries-independent convention (what autodiff returns): for ``sqexp``
∂f/∂G = w₁M + (w₂/ℓ²)(M∘E − Diag((M∘E)·1)) for symmetric M = ∂f/∂K and E the squared-exponential part (spec §3.2);
for ``arccos`` ∂f/∂G = w₂(M∘(π − Θ)/π + Diag((M∘S)·1 / πd)) with S_ij = √(d_i d_j − G_ij²), d = diag G.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.autograd.function import once_differentiable

GRAM_KERNELS = ("linear", "sqexp", "linear+sqexp", "arccos")
SECOND_ORDER_KERNELS = ("linear", "sqexp", "linear+sqexp")  # twice differentiable: the "joint" solver's Hessians
TINY = 1e-300  # floor of G_ii G_jj in the arc-cosine kernel: a zero input row gets K = 0, not 0/0


def _arccos_parts(G, d_a, d_b) -> tuple[torch.Tensor, torch.Tensor]:
    """(S, θ) of the arc-cosine kernel: S_ab = √(d_a d_b − G_ab²) and the angle θ_ab = arccos(G_ab/√(d_a d_b))."""
    dd = (d_a[:, None] * d_b[None, :]).clamp_min(TINY)
    return torch.sqrt((dd - G ** 2).clamp_min(0.0)), torch.arccos((G / torch.sqrt(dd)).clamp(-1.0, 1.0))


def _arccos_gradients(M, S, theta, d_a, d_b) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(∂f/∂G_ab, ∂f/∂d_a, ∂f/∂d_b) of the arc-cosine block for ∂f/∂K = M: M∘(π − θ)/π and the row and column sums
    of M∘S/2π over d_a and d_b."""
    MS = M * S / (2 * math.pi)
    return (M * (math.pi - theta) / math.pi, MS.sum(1) / d_a.clamp_min(math.sqrt(TINY)),
            MS.sum(0) / d_b.clamp_min(math.sqrt(TINY)))


class _ArcCos(torch.autograd.Function):
    """The order-1 arc-cosine kernel of a Gram block (without its weight), from G_ab and the diagonals d_a, d_b.
    Its gradients written out: ∂K/∂G_ab = (π − θ)/π and ∂K/∂d_a = S/(2πd_a), finite where arccos's and the square
    root's are not (coinciding rows, the diagonal: θ = 0). Its second derivatives are not (∂²K/∂G² = 1/πS), so it
    is once differentiable only."""

    @staticmethod
    def forward(ctx, G, d_a, d_b):
        S, theta = _arccos_parts(G, d_a, d_b)
        ctx.save_for_backward(S, theta, d_a, d_b)
        return (S + (math.pi - theta) * G) / math.pi

    @staticmethod
    @once_differentiable
    def backward(ctx, M):
        return _arccos_gradients(M, *ctx.saved_tensors)


@dataclass(frozen=True)
class GramKernel:
    name: str = "linear+sqexp"
    lengthscale: float = 1.0

    def __post_init__(self):
        if self.name not in GRAM_KERNELS:
            raise ValueError(f"unknown Gram kernel {self.name!r}; use one of {GRAM_KERNELS}")

    @property
    def n_weights(self) -> int:
        return 2 if self.name == "linear+sqexp" else 1

    @property
    def nonlinear(self) -> str | None:
        """The nonlinear part's name ("sqexp" or "arccos"; None for the linear kernel)."""
        return None if self.name == "linear" else self.name.split("+")[-1]

    def _weights(self, w: torch.Tensor) -> tuple:
        """(w₁, w₂) for the linear and nonlinear parts (0 for a part the kernel lacks)."""
        if self.name == "linear":
            return w[0], 0.0
        if self.n_weights == 1:
            return 0.0, w[0]
        return w[0], w[1]

    def _sqexp(self, G_ab, diag_a, diag_b) -> torch.Tensor:
        R = diag_a[:, None] + diag_b[None, :] - 2 * G_ab
        return torch.exp(-R / (2 * self.lengthscale ** 2))

    def block(self, w, G_ab, diag_a, diag_b) -> torch.Tensor:
        """K_ab from the cross block G_ab and the diagonals of G_aa and G_bb."""
        w1, w2 = self._weights(w)
        if self.nonlinear is None:
            return w1 * G_ab
        part = self._sqexp if self.nonlinear == "sqexp" else _ArcCos.apply
        return w1 * G_ab + w2 * part(G_ab, diag_a, diag_b)

    def diag(self, w, diag_a) -> torch.Tensor:
        """diag(K_aa) from diag(G_aa)."""
        w1, w2 = self._weights(w)
        return w1 * diag_a + w2 * (diag_a if self.nonlinear == "arccos" else 1.0)

    def __call__(self, w, G) -> torch.Tensor:
        d = torch.diagonal(G)
        return self.block(w, G, d, d)

    def vjp(self, w, G, M) -> torch.Tensor:
        """∂f/∂G for f with ∂f/∂K = M (symmetric), at the square Gram G."""
        w1, w2 = self._weights(w)
        out = w1 * M
        d = torch.diagonal(G)
        if self.nonlinear == "sqexp":
            ME = M * self._sqexp(G, d, d)
            out = out + (w2 / self.lengthscale ** 2) * (ME - torch.diag(ME.sum(1)))
        elif self.nonlinear == "arccos":
            g_G, g_a, g_b = _arccos_gradients(M, *_arccos_parts(G, d, d), d, d)
            out = out + w2 * (g_G + torch.diag(g_a + g_b))  # d = diag G: the diagonal's gradient joins G's
        return out

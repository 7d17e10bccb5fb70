"""Kernels on Gram matrices (the DKM paper's §2.3 and eq. 38): K(G) computed from G alone, for a square Gram or a
cross block (G_ab with the two diagonals), and their exact vector-Jacobian products.

``linear``: K = w₁G. ``sqexp``: K_ij = w₂ exp(−R_ij / 2ℓ²), R_ij = G_ii + G_jj − 2G_ij (eq. 7). ``linear+sqexp``:
their sum (eq. 38, the paper's). The weights are per layer and learned; the lengthscale ℓ is fixed (the paper gives
none; inputs are standardised). The VJP uses the all-entries-independent convention (what autodiff returns):
∂f/∂G = w₁M + (w₂/ℓ²)(M∘E − Diag((M∘E)·1)) for symmetric M = ∂f/∂K and E the squared-exponential part (spec §3.2).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

GRAM_KERNELS = ("linear", "sqexp", "linear+sqexp")


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

    def _weights(self, w: torch.Tensor) -> tuple:
        """(w₁, w₂) for the linear and squared-exponential parts (0 for a part the kernel lacks)."""
        if self.name == "linear":
            return w[0], 0.0
        if self.name == "sqexp":
            return 0.0, w[0]
        return w[0], w[1]

    def _sqexp(self, G_ab, diag_a, diag_b) -> torch.Tensor:
        R = diag_a[:, None] + diag_b[None, :] - 2 * G_ab
        return torch.exp(-R / (2 * self.lengthscale ** 2))

    def block(self, w, G_ab, diag_a, diag_b) -> torch.Tensor:
        """K_ab from the cross block G_ab and the diagonals of G_aa and G_bb."""
        w1, w2 = self._weights(w)
        return w1 * G_ab + (w2 * self._sqexp(G_ab, diag_a, diag_b) if self.name != "linear" else 0.0)

    def diag(self, w, diag_a) -> torch.Tensor:
        """diag(K_aa) from diag(G_aa)."""
        w1, w2 = self._weights(w)
        return w1 * diag_a + w2

    def __call__(self, w, G) -> torch.Tensor:
        d = torch.diagonal(G)
        return self.block(w, G, d, d)

    def vjp(self, w, G, M) -> torch.Tensor:
        """∂f/∂G for f with ∂f/∂K = M (symmetric), at the square Gram G."""
        w1, w2 = self._weights(w)
        out = w1 * M
        if self.name != "linear":
            d = torch.diagonal(G)
            ME = M * self._sqexp(G, d, d)
            out = out + (w2 / self.lengthscale ** 2) * (ME - torch.diag(ME.sum(1)))
        return out

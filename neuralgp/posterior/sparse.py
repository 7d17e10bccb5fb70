"""Feature rows with few non-zeros (DAK's grid activations): Φ as (column index, value) pairs per row, so that
Φw and (Φ∘Φ)v cost O(n·K) for K non-zeros per row instead of O(n·r)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SparseRows:
    index: torch.Tensor  # (n, K) column of each stored value
    value: torch.Tensor  # (n, K)
    n_columns: int

    @property
    def shape(self):
        return (self.index.shape[0], self.n_columns)

    def dense(self) -> torch.Tensor:
        out = torch.zeros(self.index.shape[0], self.n_columns, dtype=self.value.dtype, device=self.value.device)
        return out.scatter_add_(1, self.index, self.value)

    def matvec(self, w: torch.Tensor) -> torch.Tensor:
        """Φw for w of shape (r,) → (n,), or (S, r) → (S, n)."""
        return (self.value.to(w.dtype) * w[..., self.index]).sum(-1)

    def squared_matvec(self, v: torch.Tensor) -> torch.Tensor:
        """(Φ∘Φ)v: Σ_k φ_ik² v_k per row, e.g. the variance of Φw under a diagonal covariance diag(v)."""
        return (self.value.to(v.dtype) ** 2 * v[self.index]).sum(-1)

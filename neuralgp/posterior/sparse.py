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
        """Φw over w's last axis: (r,) → (n,), (S, r) → (S, n), (S, C, r) → (S, C, n)."""
        return (self.value.to(w.dtype) * self._pick(w)).sum(-1)

    def squared_matvec(self, v: torch.Tensor) -> torch.Tensor:
        """(Φ∘Φ)v: Σ_k φ_ik² v_k per row, e.g. the variance of Φw under a diagonal covariance diag(v); v of shape
        (r,) or (C, r) as in ``matvec``."""
        return (self.value.to(v.dtype) ** 2 * self._pick(v)).sum(-1)

    def moments(self, mean: torch.Tensor, var: torch.Tensor):
        """(Φm, (Φ∘Φ)v): the mean and variance of Φw under w ~ N(m, diag(v))."""
        return self.matvec(mean), self.squared_matvec(var)

    def _pick(self, w: torch.Tensor) -> torch.Tensor:
        """w[..., index]: (..., n, K)."""
        return w.index_select(-1, self.index.reshape(-1)).view(*w.shape[:-1], *self.index.shape)

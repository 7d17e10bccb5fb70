"""DAK's feature map (Zhao, Chen et al. 2025, eqs. 9–10, Fig. 1): network → P projections → each squashed into
the grid interval → 1-D grid activations φ(h_p), scaled by σ_p → Φ = [σ₁φ(h₁), …, σ_Pφ(h_P), b].

With weights w ~ N(0, I) on Φ's P·M + 1 columns, f = Φw is the additive GP Σ_p σ_p g̃_p(h_p) + μ of the paper: the
block scale σ_p is the prior scale of z_p, and the last column, the constant ``bias_std``, makes μ ~ N(0,
bias_std²). So every weight-space posterior of the engine (exact, variational) applies unchanged.

Squashing (the paper's "normalised into the interval" is ambiguous; its code uses each training batch's min and
max): here the fixed map h ↦ lo + (hi − lo)·sigmoid(h), identical in training and prediction and independent of
the batch; the projection W learns the scale (which is also the kernel's lengthscale, App. B).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from neuralgp.features.grid import InducedGrid
from neuralgp.posterior.positive import Positive
from neuralgp.posterior.sparse import SparseRows


class AdditiveGridFeatures(nn.Module):
    """``net`` (X → embedding_dim) → Linear(embedding_dim → P) → sigmoid into ``grid.interval`` → Φ as above.
    σ_p start at 1/√P, so that the prior variance of f is about 1 + bias_std² on standardised targets."""

    def __init__(self, net: nn.Module, embedding_dim: int, n_projections: int, grid: InducedGrid,
                 bias_std: float = 1.0):
        super().__init__()
        if n_projections < 1:
            raise ValueError(f"n_projections must be >= 1, got {n_projections}")
        self.net, self.grid = net, grid
        self.project = nn.Linear(embedding_dim, n_projections)
        self.scales = Positive(1.0 / math.sqrt(n_projections), shape=(n_projections,))
        self.bias_std = float(bias_std)
        self.n_projections = n_projections
        self.n_columns = n_projections * grid.size + 1

    def projections(self, x: torch.Tensor) -> torch.Tensor:
        """h(x) in the grid interval, (n, P)."""
        lo, hi = self.grid.interval
        return lo + (hi - lo) * torch.sigmoid(self.project(self.net(x)))

    def sparse(self, x: torch.Tensor) -> SparseRows:
        """Φ's non-zeros: at most P·L + 1 per row (L + 1 = the grid level + the bias), never the dense P·M."""
        index, value = self.grid.sparse(self.projections(x))  # (n, P, K)
        P, M, K = self.n_projections, self.grid.size, index.shape[-1]
        offsets = (torch.arange(P, device=x.device) * M).view(1, P, 1)
        value = value * self.scales().to(value.dtype).view(1, P, 1)
        n = x.shape[0]
        bias_index = torch.full((n, 1), P * M, dtype=index.dtype, device=x.device)
        bias_value = torch.full((n, 1), self.bias_std, dtype=value.dtype, device=x.device)
        return SparseRows(torch.cat([(index + offsets).reshape(n, P * K), bias_index], 1),
                          torch.cat([value.reshape(n, P * K), bias_value], 1), self.n_columns)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Dense Φ, (n, P·M + 1)."""
        return self.sparse(x).dense()

"""Feature maps built from feature maps: products (Hadamard product of kernels) and sums (additive kernels)."""

from __future__ import annotations

import torch
from torch import nn


class ProductFeatures(nn.Module):
    """ξ(x) = kron(φ₂(x), φ₁(x)) ∈ R^{p₁p₂}: ξ(x)ᵀξ(x') = (φ₁(x)ᵀφ₁(x'))(φ₂(x)ᵀφ₂(x')) (FM-GP §3.7, MLP_p₁ × MLP_p₂).

    Column i + j·p₁ (0-based) is φ₁,ᵢ·φ₂,ⱼ, the paper's column [i + (j−1)p₁] (1-based).
    """

    def __init__(self, first: nn.Module, second: nn.Module):
        super().__init__()
        self.first, self.second = first, second

    def forward(self, x):
        a, b = self.first(x), self.second(x)
        return (b.unsqueeze(-1) * a.unsqueeze(-2)).flatten(-2)


class SumFeatures(nn.Module):
    """[φ₁(x), φ₂(x), …]: the kernel is the sum Σ φₖ(x)ᵀφₖ(x') (FM-GP appendix 8.2, additive kernels)."""

    def __init__(self, *maps: nn.Module):
        super().__init__()
        self.maps = nn.ModuleList(maps)

    def forward(self, x):
        return torch.cat([m(x) for m in self.maps], dim=-1)

"""Dirichlet-based GP classification (Milios et al. 2018; FM-GP appendix 8.3) as C regressions on one Φ.

Labels become Dirichlet parameters α_ic = 1[y_i = c] + α_ε; log-normal moment matching gives per-point targets
ỹ_ic = log α_ic − s_ic/2 and noise s_ic = log(1/α_ic + 1). Both take only two values per class (label c or not),
so ΦᵀD_c⁻¹Φ = ΦᵀΦ/s_out + (1/s_in − 1/s_out) Φ_cᵀΦ_c with Φ_c the rows labelled c: all C statistics cost
O(n r²) in total, whatever C (the spec's "two-value trick").
"""

from __future__ import annotations

import math

import torch

from neuralgp.posterior.exact import STATS_DTYPE, GramStats, gram_stats

ALPHA_EPS = 0.01


def dirichlet_targets(alpha_eps: float = ALPHA_EPS) -> dict:
    """Transformed target and noise for the true class (``*_in``) and the others (``*_out``)."""
    s_in, s_out = math.log(1 / (1 + alpha_eps) + 1), math.log(1 / alpha_eps + 1)
    return {"y_in": math.log(1 + alpha_eps) - s_in / 2, "s_in": s_in,
            "y_out": math.log(alpha_eps) - s_out / 2, "s_out": s_out}


def class_gram(phi: torch.Tensor, labels: torch.Tensor, n_classes: int) -> GramStats:
    """Per-class ΦᵀΦ, Σφ and counts as a batched GramStats: A[c] = Φ_cᵀΦ_c, b[c] = Φ_cᵀ1, c[c] = n_c.

    Sums over chunks with ``+``; differentiable in ``phi``.
    """
    parts = []
    for c in range(n_classes):
        rows = phi[labels == c]
        parts.append(gram_stats(rows, torch.ones(len(rows), dtype=phi.dtype, device=phi.device)))
    return GramStats(torch.stack([p.A for p in parts]), torch.stack([p.b for p in parts]),
                     torch.stack([p.c for p in parts]), len(labels),
                     torch.zeros(n_classes, dtype=STATS_DTYPE, device=phi.device))


def dirichlet_stats(per_class: GramStats, class_mean: torch.Tensor, heteroscedastic: bool = True,
                    alpha_eps: float = ALPHA_EPS) -> GramStats:
    """Statistics of the C regressions ỹ_c − m_c on Φ with noise multipliers s_ic (all 1 if not heteroscedastic).

    ``per_class`` comes from ``class_gram``; ``class_mean`` (C,) is a constant prior mean per class
    (the targets are far from zero: about −6.9 for "not this class").
    """
    t = dirichlet_targets(alpha_eps)
    s_in, s_out = (t["s_in"], t["s_out"]) if heteroscedastic else (1.0, 1.0)
    gram_all, sum_all = per_class.A.sum(0), per_class.b.sum(0)
    n_in = per_class.c
    n_out = per_class.n - n_in
    m = class_mean.to(STATS_DTYPE)
    r_in, r_out = t["y_in"] - m, t["y_out"] - m  # residual targets (C,)
    A = gram_all / s_out + (1 / s_in - 1 / s_out) * per_class.A
    b = (r_out / s_out)[:, None] * sum_all + (r_in / s_in - r_out / s_out)[:, None] * per_class.b
    c = n_out * r_out ** 2 / s_out + n_in * r_in ** 2 / s_in
    logdet_d = n_in * math.log(s_in) + n_out * math.log(s_out)
    return GramStats(A, b, c, per_class.n, logdet_d)

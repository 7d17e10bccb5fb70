"""DBK's variance correction (§3.5): the trace regulariser of training (eq. 11) and the diagonal
correction of prediction (eq. 12), for any features Φ."""

from __future__ import annotations

import torch

from neuralgp import distributed


def trace_penalty(phi: torch.Tensor, noise: torch.Tensor, across_workers: bool = False) -> torch.Tensor:
    """tr(C)/(2σ²) with c_i = max_j ‖φ_j‖² − ‖φ_i‖² over the rows given (eq. 11; mini-batch form on a batch);
    ``across_workers``: over the rows of every worker of the process group (full batch)."""
    sq = (phi * phi).sum(-1).double()
    if not across_workers or not distributed.is_distributed():
        return (sq.max() * len(sq) - sq.sum()) / (2 * noise.double())
    top, holds = distributed.maximum_and_holder(sq.max().detach())
    top = sq.max() if holds else top  # its gradient goes to one worker
    return (top * distributed.total_count(len(sq)) - distributed.total(sq.sum())) / (2 * noise.double())


def correction_scale(phi: torch.Tensor, noise: torch.Tensor, max_prior_var: torch.Tensor) -> torch.Tensor:
    """Noise multipliers d = σ̂²(x)/σ² = 1 + (max(M, ‖φ‖²) − ‖φ‖²)/σ² of the diagonal correction (eq. 12)."""
    sq = (phi.double() ** 2).sum(-1)
    return 1.0 + (torch.clamp(max_prior_var - sq, min=0.0)) / noise.double()

"""Full-batch training objectives of weight-space GPs on features Φ = module(X): the exact log marginal
likelihood (DBK eq. 5, minus the trace regulariser of eq. 11 if asked), whole or in chunks of rows.

``module`` is any callable X → Φ with a ``noise()`` method returning σ² (DBK's and DAK's modules).
In a process group each worker passes its own rows: the statistics are summed over workers (``neuralgp.distributed``)
and the gradient reaching the network is this worker's share — sum it over workers before the step.
"""

from __future__ import annotations

import math

import torch

from neuralgp import distributed
from neuralgp.chunking import row_slices
from neuralgp.posterior.correction import trace_penalty
from neuralgp.posterior.exact import ExactPosterior, GramStats, gram_stats


def exact_objective(module, Xt, yt, trace_regulariser: bool, gram_precision: str = "float64",
                    phi: torch.Tensor | None = None) -> torch.Tensor:
    """Full-batch training objective: log p(y) (eq. 5), minus the trace regulariser (eq. 11) if asked; ``phi``:
    features already computed for Xt."""
    phi = module(Xt) if phi is None else phi
    noise = module.noise()
    stats = distributed.reduce_stats(gram_stats(phi, yt, precision=gram_precision))
    objective = ExactPosterior(stats, noise).log_marginal_likelihood()
    if trace_regulariser:
        objective = objective - trace_penalty(phi, noise, across_workers=True)
    return objective


def blockwise_exact_backward(module, Xt, yt, trace_regulariser: bool, block_rows: int,
                             gram_precision: str = "float64") -> float:
    """Gradient of −objective/n (as ``exact_objective``) accumulated into ``module``, with the network's gradient
    summed over blocks of ``block_rows`` rows in float64, and over workers in float64 too. Returns the loss.

    The cost is one forward and one backward pass, as ``exact_objective(…).backward()``, but the sum over rows no
    longer depends on how the rows are split between workers: with shards made of whole blocks
    (``distributed.shard(n, block_rows)``) every block's float32 gradient is the same bits in one process or in
    many, and only float64 additions differ — so fits with 1 and W workers agree to float64 rounding, not float32
    rounding amplified by hundreds of Adam steps.
    """
    slices = row_slices(len(yt), block_rows)
    blocks = [module(Xt[rows]) for rows in slices]  # one graph per block
    phi = torch.cat([block.detach() for block in blocks]).requires_grad_(True)
    loss = -exact_objective(module, None, yt, trace_regulariser, gram_precision, phi=phi) / \
        distributed.total_count(len(yt))
    loss.backward()  # into σ² (the same on every worker: it sees the total statistics) and into Φ
    params = [p for p in module.net.parameters() if p.requires_grad]
    sums = [torch.zeros_like(p, dtype=torch.float64) for p in params]
    for block, rows in zip(blocks, slices):
        for total, grad in zip(sums, torch.autograd.grad(block, params, phi.grad[rows], allow_unused=True)):
            if grad is not None:
                total += grad
    distributed.sum_gradients_float64(params, sums)
    return loss.item()


def chunked_exact_backward(module, Xt, yt, trace_regulariser: bool, chunk_size: int,
                           gram_precision: str = "float64") -> float:
    """Gradient of −objective/n (as ``exact_objective``) accumulated into ``module`` in O(chunk·r) memory.

    The objective depends on Φ only through A = ΦᵀΦ, b = Φᵀy (and, with the trace term, S = Σ‖φ_i‖² and
    M = max‖φ_i‖²). Pass 1 sums these over chunks without a graph; autograd on the small r×r objective gives
    ∂L/∂A, ∂L/∂b, ∂L/∂S, ∂L/∂M; pass 2 recomputes each chunk with a graph and back-propagates the linear
    surrogate ⟨∂L/∂A, A_chunk⟩ + ⟨∂L/∂b, b_chunk⟩ + …, whose gradient sums to the full one. Returns the loss.
    """
    chunks = [(Xt[i:i + chunk_size], yt[i:i + chunk_size]) for i in range(0, len(yt), chunk_size)]
    with torch.no_grad():
        stats, total_sq, max_sq = None, 0.0, -math.inf
        for X_c, y_c in chunks:
            phi = module(X_c)
            part = gram_stats(phi, y_c, precision=gram_precision)
            stats = part if stats is None else stats + part
            if trace_regulariser:
                sq = (phi * phi).sum(-1).double()
                total_sq, max_sq = total_sq + sq.sum(), max(max_sq, float(sq.max()))
        stats = distributed.reduce_stats(stats)
        if trace_regulariser:  # the max's subgradient goes to one point: on the lowest worker holding it
            top, holds_max = distributed.maximum_and_holder(torch.tensor(max_sq, dtype=torch.float64))
            max_sq, total_sq = float(top), distributed.total(torch.as_tensor(total_sq, dtype=torch.float64))
    n = stats.n
    A, b = stats.A.clone().requires_grad_(True), stats.b.clone().requires_grad_(True)
    noise = module.noise()
    objective = ExactPosterior(GramStats(A, b, stats.c, n, stats.logdet_d), noise).log_marginal_likelihood()
    if trace_regulariser:
        S = torch.as_tensor(total_sq, dtype=torch.float64).requires_grad_(True)
        M = torch.tensor(max_sq, dtype=torch.float64, requires_grad=True)
        objective = objective - (n * M - S) / (2 * noise.double())
    loss = -objective / n
    loss.backward()  # into σ² directly, and into A, b (and S, M) for the second pass
    max_claimed = not (trace_regulariser and holds_max)
    for X_c, y_c in chunks:
        phi = module(X_c)
        part = gram_stats(phi, y_c, precision=gram_precision)
        surrogate = (part.A * A.grad).sum() + (part.b * b.grad).sum()
        if trace_regulariser:
            sq = (phi * phi).sum(-1).double()
            surrogate = surrogate + S.grad * sq.sum()
            if not max_claimed and float(sq.max()) == max_sq:
                surrogate, max_claimed = surrogate + M.grad * sq.max(), True
        surrogate.backward()
    return loss.item()

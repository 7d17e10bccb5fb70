"""DAK's feature map (Zhao, Chen et al. 2025, eqs. 9–10, Fig. 1): network → P projections → each squashed into
the grid interval → 1-D grid activations φ(h_p), scaled by σ_p → Φ = [σ₁φ(h₁), …, σ_Pφ(h_P), b].

With weights w ~ N(0, I) on Φ's P·M + 1 columns, f = Φw is the additive GP Σ_p σ_p g̃_p(h_p) + μ of the paper: the
block scale σ_p is the prior scale of z_p, and the last column, the constant ``bias_std``, makes μ ~ N(0,
bias_std²). So every weight-space posterior of the engine (exact, variational) applies unchanged.

Squashing (the paper's "normalised into the interval" is ambiguous; its code uses each training batch's min and
max): here the fixed map h ↦ lo + (hi − lo)·sigmoid(h), identical in training and prediction and independent of
the batch; the projection W learns the scale (which is also the kernel's lengthscale, App. B), from PyTorch's start
or, with ``standardise_projections``, from mean 0 and a chosen std on the training rows.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from neuralgp.datasets.scaling import Scaler
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
        self._block_tables = {}

    def block_tables(self, device, dtype):
        """The grid's per-cell tables repeated over the P blocks, for ``_GridMoments``: the columns of Φ at each
        (level, block, cell), (L·P·2^L,) int64; α | β per (block, cell), (2L, P·2^L); the first cell of each block,
        (P, 1). Cached per device and dtype."""
        key = (str(device), dtype)
        if key not in self._block_tables:
            index_table, coefs = self.grid.tables
            P, n_cells, M = self.n_projections, index_table.shape[0], self.grid.size
            columns = index_table.T.repeat(1, P) + (torch.arange(P) * M).repeat_interleave(n_cells)
            offsets = (torch.arange(P, dtype=torch.float64) * n_cells).view(P, 1)
            self._block_tables[key] = (columns.reshape(-1).to(device), coefs.T.repeat(1, P).to(device, dtype),
                                       offsets.to(device, dtype))
        return self._block_tables[key]

    @torch.no_grad()
    def standardise_projections(self, x: torch.Tensor, spread: float = 1.0, chunk_size: int = 8192):
        """Rescale the projection layer once, before training, so that each of the P pre-squash projections has mean
        0 and standard deviation ``spread`` over the rows of x (``Scaler("standard")`` over every data-parallel
        worker's rows, so that every worker starts alike). At PyTorch's default initialisation they spread with
        std ≈ 0.3, so every h starts in the two middle cells of the grid and the network must first grow W to reach
        the others; the paper's code instead maps each batch's min and max onto the interval (docs/methods/dak.md,
        "Where the projections start")."""
        a = torch.cat([self.project(self.net(part)) for part in x.split(chunk_size)])
        scaler = Scaler("standard").fit(a.cpu().numpy(), across_workers=True)  # a constant projection: centred
        weight = self.project.weight
        shift, factor = (torch.as_tensor(v, dtype=weight.dtype, device=weight.device)
                         for v in (scaler.shift_, spread / scaler.scale_))
        weight.mul_(factor[:, None])
        self.project.bias.sub_(shift).mul_(factor)

    def projections(self, x: torch.Tensor) -> torch.Tensor:
        """h(x) in the grid interval, (n, P)."""
        lo, hi = self.grid.interval
        return lo + (hi - lo) * torch.sigmoid(self.project(self.net(x)))

    def sparse(self, x: torch.Tensor) -> GridRows:
        """Φ of the rows of x: at most P·L + 1 non-zeros per row (L + 1 = the grid level + the bias), never the dense
        P·M."""
        return GridRows(self, self.projections(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Dense Φ, (n, P·M + 1)."""
        return self.sparse(x).dense()


class GridRows:
    """Φ of a batch, from its projections h (n, P): the explicit non-zeros (``rows``, a ``SparseRows``, built when
    first asked for) for every use, and ``moments`` — Φm and (Φ∘Φ)v, all a mean-field ELBO needs — in one autograd
    node (``_GridMoments``) when the grid has per-cell tables (the Laplace kernel up to level 12; h always lies in
    its interval, after the sigmoid); otherwise through ``rows``. A DAK-CF step's cost is per-operation overhead
    at these sizes, not arithmetic."""

    def __init__(self, features: AdditiveGridFeatures, h: torch.Tensor):
        self.features, self.h, self.scales = features, h, features.scales()
        self.n_columns = features.n_columns
        self._grad = torch.is_grad_enabled()  # the rows are built later as they would have been now
        self._rows = None

    @property
    def shape(self):
        return (self.h.shape[0], self.n_columns)

    @property
    def rows(self) -> SparseRows:
        if self._rows is None:
            with torch.set_grad_enabled(self._grad):
                self._rows = self._build_rows()
        return self._rows

    def _build_rows(self) -> SparseRows:
        f, h = self.features, self.h
        index, value = f.grid.sparse(h, inside=True)  # (n, P, K); the sigmoid keeps h in the interval
        n, (P, K) = h.shape[0], index.shape[1:]
        offsets = (torch.arange(P, device=h.device) * f.grid.size).view(1, P, 1)
        value = value * self.scales.to(value.dtype).view(1, P, 1)
        bias_index = torch.full((n, 1), P * f.grid.size, dtype=index.dtype, device=h.device)
        bias_value = torch.full((n, 1), f.bias_std, dtype=value.dtype, device=h.device)
        return SparseRows(torch.cat([(index + offsets).reshape(n, P * K), bias_index], 1),
                          torch.cat([value.reshape(n, P * K), bias_value], 1), self.n_columns)

    def dense(self):
        return self.rows.dense()

    def matvec(self, w):
        return self.rows.matvec(w)

    def squared_matvec(self, v):
        return self.rows.squared_matvec(v)

    def moments(self, mean: torch.Tensor, var: torch.Tensor):
        """(Φm, (Φ∘Φ)v) for weights of shape (..., r): (..., n) each."""
        f, h = self.features, self.h
        if self._rows is not None or f.grid.tables is None:  # h is in the interval: the sigmoid puts it there
            return self.rows.moments(mean, var)
        columns, coefs, offsets = f.block_tables(h.device, mean.dtype)
        return _GridMoments.apply(h, self.scales, mean, var, f.grid, f.bias_std, columns, coefs, offsets)


class _GridMoments(torch.autograd.Function):
    """Φm and (Φ∘Φ)v for Φ = [σ_pφ(h_p)]_p | bias_std, from h (inside the grid's interval, the Laplace kernel's
    per-cell tables), σ, m, v, with the gradients written out: with a = m, b = v at the non-zeros,
    ∂Φm/∂φ = σa, ∂(Φ∘Φ)v/∂φ = 2σ²φb, and dφ/dh = (β e^{z} − α e^{−z})/θ.

    Laid out (level, projection, row), so that every broadcast is over whole rows (on a CPU, broadcasting over a
    middle axis of a (n, P, L) tensor costs 5–10× the same product in this layout), and one table lookup per
    (projection, row) — its cell — fetches α, β and the weights' m and v at the cell's L columns together."""

    @staticmethod
    def forward(ctx, h, scales, mean, var, grid, bias_std, columns, coefs, offsets):
        (n, P), L, lead = h.shape, grid.level, mean.shape[:-1]
        cell, z = grid.cells(h.T.contiguous())  # (P, n)
        gcell = (cell + offsets).long().view(-1)  # the cell's column in the (projection, cell) tables
        down = torch.exp(-z).to(mean.dtype).view(1, P * n)
        up = down.reciprocal()
        per_cell = [mean.index_select(-1, columns).reshape(-1, coefs.shape[1]),
                    var.index_select(-1, columns).reshape(-1, coefs.shape[1])]  # (C·L, P·2^L) each
        rows = torch.cat([coefs, *per_cell]).index_select(1, gcell)  # (2L + 2C·L, P·n)
        a_down, b_up = rows[:L] * down, rows[L:2 * L] * up
        value, slope = (a_down + b_up).view(L, P, n), (b_up - a_down).view(L, P, n)
        scaled = value * scales.to(mean.dtype).view(1, P, 1)
        CL = per_cell[0].shape[0]
        picked_mean = rows[2 * L:2 * L + CL].view(*lead, L, P, n)
        picked_var = rows[2 * L + CL:].view(*lead, L, P, n)
        out_mean = (picked_mean * scaled).sum((-3, -2)) + bias_std * mean[..., -1:]
        out_var = (picked_var * scaled * scaled).sum((-3, -2)) + bias_std ** 2 * var[..., -1:]
        ctx.save_for_backward(gcell, value, slope, scales, scaled, picked_mean, picked_var, columns)
        ctx.grid, ctx.bias_std, ctx.r, ctx.h_dtype = grid, bias_std, mean.shape[-1], h.dtype
        return out_mean, out_var

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_mean, grad_var):
        gcell, value, slope, scales, scaled, picked_mean, picked_var, columns = ctx.saved_tensors
        L, P, n = value.shape
        lead, n_cells = picked_mean.shape[:-3], 2 ** L
        gm, gv = grad_mean[..., None, None, :], grad_var[..., None, None, :]  # (..., 1, 1, n)
        gv_scaled = gv * scaled
        grad_scaled = torch.addcmul(gm * picked_mean, gv_scaled, picked_var, value=2.0).reshape(-1, L, P, n).sum(0)
        grad_h = (grad_scaled * slope).sum(0) * (scales.to(value.dtype).view(P, 1) / ctx.grid.lengthscale)
        grad_scales = (grad_scaled * value).sum((0, 2)).to(scales.dtype)
        source = torch.cat([(gm * scaled).reshape(-1, P * n), (gv_scaled * scaled).reshape(-1, P * n)])
        per_cell = source.new_zeros(source.shape[0], P * n_cells).index_add_(1, gcell, source)
        half = per_cell.shape[0] // 2
        grads = []
        for part, grad_out, factor in ((per_cell[:half], grad_mean, ctx.bias_std),
                                       (per_cell[half:], grad_var, ctx.bias_std ** 2)):
            grad = part.new_zeros(*lead, ctx.r).index_add_(-1, columns, part.reshape(*lead, -1))
            grad[..., -1] += factor * grad_out.sum(-1)
            grads.append(grad)
        return grad_h.T.to(ctx.h_dtype), grad_scales, grads[0], grads[1], None, None, None, None, None

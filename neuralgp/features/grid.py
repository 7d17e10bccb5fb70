"""The induced grid of DAK (Zhao, Chen et al. 2025, App. A): 1-D kernel activations φ(h) = k(h, U) R on a fixed
level-sorted dyadic grid U, with R the inverse upper Cholesky factor, RᵀK_UU R = I.

Then φ(h)φ(h')ᵀ = k(h, U)K_UU⁻¹k(U, h') (the Nyström / kriging form of eq. 7) and a 1-D GP g ≈ φ(h)z with
z ~ N(0, I_M). For the Laplace kernel (Markov of order one) R has at most 3 non-zeros per column and is built in
O(M) by Algorithm 1, and φ(h) has at most L non-zeros (one per level) for any h, inside the interval or not: the
activations are computed from those alone (``sparse``), never from a dense M-vector.
"""

from __future__ import annotations

import math

import torch
from torch.autograd.function import once_differentiable

KERNELS = ("laplace", "matern32")
MAX_LEVEL = 20
TABLE_LEVEL = 12  # Laplace activations from per-cell tables (2^L rows) up to this level, from the stencils above it
TABLE_MAX_EXPONENT = 20.0  # … and while e^{±(h − c_k)/θ} stays below e^20 inside a cell


def sorted_dyadic_points(level: int) -> torch.Tensor:
    """X_L^sort on (0, 1) (eq. 17): level 1's point, then level 2's, …, increasing within a level; M = 2^L − 1."""
    return torch.cat([torch.arange(1, 2 ** lv, 2, dtype=torch.float64) / 2 ** lv for lv in range(1, level + 1)])


class InducedGrid:
    """M = 2^L − 1 grid points on ``interval`` in the level-sorted order, a unit-variance 1-D kernel
    (``laplace``: exp(−|a − b|/θ); ``matern32``: (1 + √3|a − b|/θ) exp(−√3|a − b|/θ)) with lengthscale θ.

    ``grid(h)`` maps an (n, P) tensor to the (n, P, M) activations φ(h) = k(h, U) R; ``grid.sparse(h)`` gives
    the same as (column indices, values) of the non-zeros, (n, P, L) each for the Laplace kernel.
    """

    def __init__(self, level: int, interval=(0.0, 1.0), kernel: str = "laplace", lengthscale: float = 1.0):
        if isinstance(level, bool) or not isinstance(level, int) or not 1 <= level <= MAX_LEVEL:
            raise ValueError(f"level must be an integer in [1, {MAX_LEVEL}] (M = 2^level − 1 grid points), "
                             f"got {level!r}")
        lo, hi = (float(v) for v in interval)
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"interval must be (lo, hi) with finite lo < hi, got {tuple(interval)!r}")
        if kernel not in KERNELS:
            raise ValueError(f"unknown kernel {kernel!r}; use one of {KERNELS}")
        if not (math.isfinite(float(lengthscale)) and float(lengthscale) > 0):
            raise ValueError(f"lengthscale must be a positive number, got {lengthscale!r}")
        self.level, self.interval, self.kernel, self.lengthscale = level, (lo, hi), kernel, float(lengthscale)
        self.size = 2 ** level - 1
        self.points = lo + (hi - lo) * sorted_dyadic_points(level)
        self._R = None
        self._tables = None
        if kernel == "laplace":
            self._stencil = self._laplace_stencil()
            if level <= TABLE_LEVEL and (hi - lo) / 2 ** (level + 1) / self.lengthscale <= TABLE_MAX_EXPONENT:
                self._tables = self._laplace_tables()

    def k(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """The kernel on broadcast tensors; 0 against ±inf (Algorithm 1's convention)."""
        d = (a - b).abs() / self.lengthscale
        if self.kernel == "laplace":
            return torch.exp(-d)
        d = math.sqrt(3.0) * d
        return torch.where(torch.isinf(d), torch.zeros_like(d), (1.0 + d) * torch.exp(-d))

    # -- R ------------------------------------------------------------------------------------------
    def _laplace_stencil(self):
        """Per column j (the point u_j of level ℓ): the points (u_left, u_j, u_right) — its neighbours from coarser
        levels, ±inf at the ends — and the coefficients (c_left, c_mid, c_right) of Algorithm 1, from the reduced
        2×2 / 1×1 systems at the ends. Two (M, 3) float64 tensors."""
        lo, hi = self.interval
        points, coefs = [], []
        for lv in range(1, self.level + 1):
            to_x = lambda j: lo + (hi - lo) * j / 2 ** lv  # noqa: E731
            for i in range(1, 2 ** lv, 2):
                pts = [to_x(i - 1) if i > 1 else -math.inf, to_x(i), to_x(i + 1) if i < 2 ** lv - 1 else math.inf]
                finite = [p for p in pts if math.isfinite(p)]
                x = torch.tensor(finite, dtype=torch.float64)
                e = torch.zeros(len(finite), dtype=torch.float64)
                e[finite.index(pts[1])] = 1.0
                c = torch.linalg.solve(self.k(x[:, None], x[None, :]), e)  # eq. 19 on the finite points
                c = iter((c / torch.sqrt(c[finite.index(pts[1])])).tolist())
                points.append(pts)
                coefs.append([next(c) if math.isfinite(p) else 0.0 for p in pts])
        return torch.tensor(points, dtype=torch.float64), torch.tensor(coefs, dtype=torch.float64)

    def _laplace_tables(self):
        """Per fine cell k — the 2^L intervals between consecutive grid points of all levels, centre c_k — and level
        ℓ: the column of h's level-ℓ stencil and (α, β) with φ_ℓ(h) = α e^{−(h − c_k)/θ} + β e^{(h − c_k)/θ} for
        every h in the cell: each stencil point lies wholly left or right of the cell, so |h − u| = ±(h − c_k) +
        |c_k − u| there. The columns (2^L, L), int64, and [α | β] (2^L, 2L), float64."""
        L, (lo, hi) = self.level, self.interval
        cells, levels = torch.arange(2 ** L), torch.arange(L)
        index = 2 ** levels - 1 + (cells[:, None] >> (L - levels))  # level ℓ's columns start at 2^(ℓ−1) − 1
        centre = lo + (hi - lo) * (cells.double() + 0.5) / 2 ** L
        points, coefs = (t[index] for t in self._stencil)  # (2^L, L, 3)
        offset = (points - centre[:, None, None]) / self.lengthscale
        weight = coefs * torch.exp(-offset.abs())  # 0 for the missing (infinite) ends
        left = offset < 0
        return index, torch.cat([torch.where(left, weight, 0.0).sum(-1), torch.where(left, 0.0, weight).sum(-1)], 1)

    def inverse_cholesky(self) -> torch.Tensor:
        """R (M × M, upper triangular, float64) with RᵀK_UU R = I: Algorithm 1 in O(M) for the Laplace kernel,
        inv(chol(K_UU))ᵀ for Matérn-3/2 (not Markov of order one, so R is dense)."""
        if self._R is None:
            M = self.size
            if self.kernel == "laplace":
                points, coefs = self._stencil
                R = torch.zeros(M, M, dtype=torch.float64)
                row = {float(p): j for j, p in enumerate(self.points.tolist())}
                for j in range(M):
                    for u, c in zip(points[j].tolist(), coefs[j].tolist()):
                        if math.isfinite(u):
                            R[row[u], j] = c
            else:
                K = self.k(self.points[:, None], self.points[None, :])
                L = torch.linalg.cholesky(K)
                R = torch.linalg.solve_triangular(L, torch.eye(M, dtype=torch.float64), upper=False).T
            self._R = R
        return self._R

    # -- activations --------------------------------------------------------------------------------
    def sparse(self, h: torch.Tensor, inside: bool | None = None):
        """(index, value) of φ(h)'s non-zeros, each of shape h.shape + (K,): K = L for the Laplace kernel (at most
        one non-zero per level, found from h's dyadic cell; one autograd node, ``_LaplaceActivations``), K = M
        (all columns) for Matérn-3/2. ``inside``: as in ``activations``."""
        if self.kernel != "laplace":
            index = torch.arange(self.size, device=h.device).expand(*h.shape, self.size)
            return index, self(h)
        return _LaplaceActivations.apply(h, self, inside)

    def activations(self, h: torch.Tensor, inside: bool | None = None):
        """Laplace kernel only, outside autograd: (index, value, slope) of φ(h)'s ≤ L non-zeros, slope = dφ/dh,
        each h.shape + (L,). From the per-cell tables (``_laplace_tables``): two exponentials per h whatever the
        level, φ_ℓ = α e^{−z} + β e^{z}, z = (h − c_k)/θ, dφ_ℓ/dh = (β e^{z} − α e^{−z})/θ; outside the interval
        φ(h) = φ(nearest end)·e^{−dist/θ}. Otherwise from the ≤ 3-point stencil of h's column at each level:
        φ_j(h) = Σ_c coef_jc exp(−|h − u_jc|/θ), dφ_j/dh = −Σ_c coef_jc exp(−|h − u_jc|/θ) sign(h − u_jc)/θ.
        ``inside=True`` asserts h lies in the interval (squashed into it, as DAK's projections), skipping the check
        (on a GPU a synchronisation); None checks."""
        if self.kernel != "laplace":
            raise ValueError("activations() with slopes is for the Laplace kernel; use grid(h) for Matérn-3/2")
        (lo, hi), theta = self.interval, self.lengthscale
        if self._tables is None:
            return self._stencil_activations(h)
        index_table, coefs = self._tables
        index_table, coefs = index_table.to(h.device), coefs.to(h.device, h.dtype)
        L = self.level
        outside = not (inside or self.inside(h))
        clamped = h.clamp(lo, hi) if outside else h
        cell, z = self.cells(clamped)
        cell = cell.long().reshape(-1)
        down = torch.exp(-z).unsqueeze(-1)
        up = down.reciprocal()
        ab = coefs.index_select(0, cell).view(*h.shape, 2 * L)
        a_down, b_up = ab[..., :L] * down, ab[..., L:] * up
        value = a_down + b_up
        slope = (b_up - a_down).div_(theta)
        if outside:
            side = (h > hi).to(h.dtype) - (h < lo).to(h.dtype)  # +1 right of the interval, −1 left, 0 inside
            value = value * torch.exp(-(h - clamped).abs() / theta).unsqueeze(-1)
            slope = (slope * (1.0 - side.abs()).unsqueeze(-1) - side.unsqueeze(-1) * value / theta)
        index = index_table.index_select(0, cell).view(*h.shape, L)
        return index, value, slope

    def inside(self, h: torch.Tensor) -> bool:
        """Whether every entry of h lies in the interval (where ``cells`` and the tables apply)."""
        if not h.numel():
            return True
        low, high = torch.aminmax(h)
        return bool(low >= self.interval[0] and high <= self.interval[1])

    def cells(self, h: torch.Tensor):
        """For h inside the interval: the index k of its fine cell (one of the 2^L between consecutive grid points
        of all levels; a float tensor of integers) and z = (h − c_k)/θ, c_k the cell's centre; h's shape each."""
        (lo, hi), n_cells = self.interval, 2 ** self.level
        position = (h - lo) * (n_cells / (hi - lo))  # in cell widths from lo
        cell = position.floor().clamp_(0, n_cells - 1)
        return cell, (position - cell).sub_(0.5).mul_((hi - lo) / n_cells / self.lengthscale)

    @property
    def tables(self):
        """The Laplace kernel's per-cell tables below ``TABLE_LEVEL`` (else None): for cell k and level ℓ the column
        of h's non-zero, (2^L, L) int64, and (α | β) with φ_ℓ(h) = α e^{−z} + β e^{z}, (2^L, 2L) float64."""
        return self._tables

    def _stencil_activations(self, h):
        (lo, hi), theta = self.interval, self.lengthscale
        stencil = torch.cat(self._stencil, 1).to(device=h.device, dtype=h.dtype)  # (M, 6): points, coefficients
        counts = 2 ** torch.arange(self.level, device=h.device)  # columns per level: 1, 2, 4, …
        t = ((h - lo) / (hi - lo)).unsqueeze(-1)
        cell = torch.minimum(torch.floor(t * counts).clamp_min(0), counts - 1).long()
        index = counts - 1 + cell  # level ℓ's columns start at 2^(ℓ−1) − 1
        rows = stencil.index_select(0, index.reshape(-1)).view(*index.shape, 6)
        diff = h[..., None, None] - rows[..., :3]  # (..., L, 3)
        terms = rows[..., 3:] * torch.exp(-diff.abs() / theta)  # exp(−inf) = 0 at the missing ends
        return index, terms.sum(-1), (terms * torch.sign(diff)).sum(-1).div_(-theta)

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        """Dense activations φ(h) = k(h, U) R, shape h.shape + (M,), in h's dtype."""
        if self.kernel == "laplace":
            index, value = self.sparse(h)
            return torch.zeros(*h.shape, self.size, dtype=h.dtype, device=h.device).scatter_(-1, index, value)
        U, R = self.points.to(h.device, h.dtype), self.inverse_cholesky().to(h.device, h.dtype)
        return self.k(h.unsqueeze(-1), U) @ R

    def __repr__(self):
        return (f"InducedGrid(level={self.level}, interval={self.interval}, kernel={self.kernel!r}, "
                f"lengthscale={self.lengthscale})")


class _LaplaceActivations(torch.autograd.Function):
    """φ(h) for the Laplace kernel (``InducedGrid.activations``) as one node of the graph, its derivative computed in
    the same pass."""

    @staticmethod
    def forward(ctx, h, grid, inside):
        index, value, slope = grid.activations(h, inside)
        ctx.save_for_backward(slope)
        ctx.mark_non_differentiable(index)
        return index, value

    @staticmethod
    @once_differentiable
    def backward(ctx, _grad_index, grad_value):
        (slope,) = ctx.saved_tensors
        return (grad_value * slope).sum(-1), None, None

"""The induced dyadic grid of DAK (spec §9.1 checks 1–6): Algorithm 1 against the dense factor, sparsity, the
Nyström identity, convergence in the level, and clear errors."""

import math

import pytest
import torch

from neuralgp.features import InducedGrid

F64 = torch.float64
CASES = [(level, theta, interval) for level in (1, 2, 3, 6) for theta in (0.3, 1.0, 5.0)
         for interval in ((0.0, 1.0), (-1.0, 1.0))] + [(6, 1e-4, (0.0, 1.0))]  # the last: from the stencils


def _K(grid, a, b):
    return grid.k(a[:, None], b[None, :])


def test_sorted_dyadic_order_and_affine_map():
    assert InducedGrid(3).points.tolist() == [1 / 2, 1 / 4, 3 / 4, 1 / 8, 3 / 8, 5 / 8, 7 / 8]
    points = InducedGrid(6, (-1, 1)).points
    assert len(points) == 63 and sorted(points.tolist()) == [k / 32 for k in range(-31, 32)]


@pytest.mark.parametrize("level,theta,interval", CASES)
def test_algorithm1_equals_the_dense_inverse_cholesky(level, theta, interval):
    grid = InducedGrid(level, interval, "laplace", theta)
    U, R = grid.points, grid.inverse_cholesky()
    K = _K(grid, U, U)
    dense = torch.linalg.inv(torch.linalg.cholesky(K)).T
    assert torch.allclose(R, dense, rtol=0, atol=1e-10)
    assert (R.T @ K @ R - torch.eye(grid.size, dtype=F64)).abs().max() < 1e-10
    assert torch.equal(R, torch.triu(R))
    nnz = (R != 0).sum(0)
    assert nnz.max() <= 3 and nnz[0] == 1 and int(nnz.sum()) <= 3 * grid.size


@pytest.mark.parametrize("level,theta,interval", CASES)
def test_activations_are_sparse_and_give_the_nystrom_kernel(level, theta, interval):
    grid = InducedGrid(level, interval, "laplace", theta)
    lo, hi = interval
    h = torch.linspace(lo - 2, hi + 2, 257, dtype=F64)  # inside and outside the interval, grid points included
    h = torch.cat([h, grid.points])
    phi = grid(h[:, None])[:, 0]  # (n, M)
    U, R = grid.points, grid.inverse_cholesky()
    assert torch.allclose(phi, _K(grid, h, U) @ R, rtol=0, atol=1e-10)
    assert (phi != 0).sum(-1).max() <= level
    nystrom = _K(grid, h, U) @ torch.linalg.solve(_K(grid, U, U), _K(grid, U, h))
    assert torch.allclose(phi @ phi.T, nystrom, rtol=0, atol=1e-10)
    prior_var = (phi ** 2).sum(-1)
    assert prior_var.max() <= 1 + 1e-12
    assert torch.allclose(prior_var[-grid.size:], torch.ones(grid.size, dtype=F64), atol=1e-12)


def test_sparse_form_matches_dense_and_keeps_batch_shape():
    grid = InducedGrid(4, (0, 1))
    h = torch.rand(5, 3, dtype=F64) * 1.4 - 0.2
    index, value = grid.sparse(h)
    assert index.shape == value.shape == (5, 3, 4)
    dense = torch.zeros(5, 3, grid.size, dtype=F64).scatter_(-1, index, value)
    assert torch.allclose(dense, grid(h))


def test_approximation_error_shrinks_with_the_level():
    x = torch.linspace(0, 1, 201, dtype=F64)
    errors = []
    for level in range(2, 9):
        grid = InducedGrid(level, (0, 1), "laplace", 0.5)
        phi = grid(x[:, None])[:, 0]
        errors.append(float((_K(grid, x, x) - phi @ phi.T).abs().max()))
    assert all(b <= a + 1e-12 for a, b in zip(errors, errors[1:])) and errors[-1] < 0.05 * errors[0]


def test_matern32_is_dense_but_whitened():
    grid = InducedGrid(4, (-1, 1), "matern32", 1.0)
    U, R = grid.points, grid.inverse_cholesky()
    assert (R.T @ _K(grid, U, U) @ R - torch.eye(grid.size, dtype=F64)).abs().max() < 1e-8
    h = torch.linspace(-1.5, 1.5, 31, dtype=F64)[:, None]
    assert torch.allclose(grid(h)[:, 0], _K(grid, h[:, 0], U) @ R, atol=1e-12)


@pytest.mark.parametrize("kwargs,match", [
    ({"level": 0}, "level"), ({"level": 2.0}, "level"), ({"level": True}, "level"), ({"level": 21}, "level"),
    ({"level": 3, "interval": (1.0, 0.0)}, "lo < hi"), ({"level": 3, "interval": (0.0, math.inf)}, "lo < hi"),
    ({"level": 3, "kernel": "rbf"}, "kernel"), ({"level": 3, "lengthscale": 0.0}, "lengthscale")])
def test_bad_grid_arguments_are_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        InducedGrid(**kwargs)


def test_activation_gradient_passes_finite_differences():
    grid = InducedGrid(4, (0, 1), "laplace", 0.7)
    h = (torch.rand(6, 3, dtype=F64) * 1.4 - 0.2).requires_grad_(True)  # inside and outside the interval
    weights = torch.randn(6, 3, 4, dtype=F64)
    assert torch.autograd.gradcheck(lambda x: (grid.sparse(x)[1] * weights).sum(), (h,))


@pytest.mark.parametrize("level,theta,interval", [(1, 0.3, (0, 1)), (3, 0.3, (0, 1)), (6, 0.05, (-1, 1)),
                                                  (8, 2.0, (-3, 2))])
def test_table_activations_equal_the_stencil_ones(level, theta, interval):
    """The fast path (per-cell tables) against the stencil sums: values and gradients, inside, outside, on points."""
    grid = InducedGrid(level, interval, "laplace", theta)
    stencil = InducedGrid(level, interval, "laplace", theta)
    stencil._tables = None
    assert grid._tables is not None
    lo, hi = interval
    h = torch.cat([torch.linspace(lo - 1, hi + 1, 301, dtype=F64), grid.points]).requires_grad_(True)
    weights = torch.randn(len(h), level, dtype=F64)
    (index, value), (index2, value2) = grid.sparse(h), stencil.sparse(h)
    assert torch.equal(index, index2) and torch.allclose(value, value2, rtol=0, atol=1e-12)
    g1, = torch.autograd.grad((value * weights).sum(), h)
    g2, = torch.autograd.grad((value2 * weights).sum(), h)
    kinks = torch.cat([grid.points, torch.tensor(interval, dtype=F64)])
    on_kink = ((h.detach()[:, None] - kinks).abs() < 1e-9).any(-1)  # |h − u| has no derivative at u
    assert 0 < on_kink.sum() < len(h) // 2
    assert torch.allclose(g1[~on_kink], g2[~on_kink], rtol=0, atol=1e-9)

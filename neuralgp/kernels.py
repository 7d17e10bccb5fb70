"""The kernel registry: GPyTorch kernels by name, used by the GPyTorch baselines, GPnn and (next) the two-stage
method's kernel search. Nothing here re-implements a kernel.

``make_kernel("matern32", dim=8, ard=True, lengthscale=2.0)`` returns ScaleKernel(MaternKernel(ν=3/2)) with eight
lengthscales started at 2; the linear kernel carries its own variance and is returned unscaled.
``predicting()``: the context the exact GPyTorch GPs (the baselines, the two-stage variance GP) predict in.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from gpytorch.kernels import Kernel, LinearKernel, MaternKernel, RBFKernel, ScaleKernel
from gpytorch.utils.warnings import GPInputWarning


@dataclass(frozen=True)
class KernelSpec:
    """How to build one registered kernel: ``build(ard_num_dims, batch_shape)``; stationary kernels have
    lengthscales and an output scale σ_f² (ScaleKernel), the linear kernel has neither."""

    build: object
    stationary: bool = True
    description: str = ""


KERNELS = {
    "rbf": KernelSpec(lambda ard, batch: RBFKernel(ard_num_dims=ard, batch_shape=batch),
                      description="squared exponential exp(−r²/2)"),
    "matern12": KernelSpec(lambda ard, batch: MaternKernel(nu=0.5, ard_num_dims=ard, batch_shape=batch),
                           description="Matérn ν = 1/2, the exponential kernel exp(−r)"),
    "matern32": KernelSpec(lambda ard, batch: MaternKernel(nu=1.5, ard_num_dims=ard, batch_shape=batch),
                           description="Matérn ν = 3/2"),
    "matern52": KernelSpec(lambda ard, batch: MaternKernel(nu=2.5, ard_num_dims=ard, batch_shape=batch),
                           description="Matérn ν = 5/2"),
    "linear": KernelSpec(lambda ard, batch: LinearKernel(batch_shape=batch), stationary=False,
                         description="xᵀx' times a learned variance"),
}


def make_kernel(name: str, dim: int | None = None, ard: bool = False, lengthscale: float | None = None,
                batch_shape: torch.Size = torch.Size()) -> Kernel:
    """The registered kernel ``name``: one lengthscale per input dimension if ``ard`` (needs ``dim``), started
    at ``lengthscale`` if given (else GPyTorch's default), inside a ScaleKernel if stationary."""
    if name not in KERNELS:
        raise ValueError(f"unknown kernel {name!r}; use one of {sorted(KERNELS)}")
    spec = KERNELS[name]
    if not spec.stationary:
        return spec.build(None, batch_shape)
    if ard and dim is None:
        raise ValueError("an ARD kernel needs the input dimension dim")
    base = spec.build(dim if ard else None, batch_shape)
    if lengthscale is not None:
        base.lengthscale = torch.full((*batch_shape, 1, dim if ard else 1), float(lengthscale))
    return ScaleKernel(base, batch_shape=batch_shape)


STATIONARY_KERNELS = tuple(name for name, spec in KERNELS.items() if spec.stationary)


@contextmanager
def predicting():
    """GPyTorch's GPInputWarning "The input matches the stored training data. Did you forget to call
    model.train()?" silenced: it is a hint for hand-written training loops, and our fitted exact GPs predict at
    their training inputs in eval mode on purpose (``score(X_train, y_train)``, in-sample residuals)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=GPInputWarning)
        yield

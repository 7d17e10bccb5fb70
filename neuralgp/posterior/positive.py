"""The one parameterisation of learned positive quantities (noise, output scale): floor + softplus(raw)."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn.functional import softplus


def inverse_softplus(x: float) -> float:
    """y with softplus(y) = x."""
    return x + math.log(-math.expm1(-x))


class Positive(nn.Module):
    """A learned value ``floor + softplus(raw)`` of the given shape; calling it returns the value."""

    def __init__(self, init: float, floor: float = 0.0, shape: tuple = ()):
        super().__init__()
        if init <= floor:
            raise ValueError(f"the initial value ({init}) must exceed the floor ({floor})")
        self.floor = floor
        self.raw = nn.Parameter(torch.full(shape, inverse_softplus(init - floor)))

    def forward(self) -> torch.Tensor:
        return self.floor + softplus(self.raw)

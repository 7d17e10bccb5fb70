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
    """A learned value ``floor + softplus(raw)`` of the given shape; calling it returns the value. ``names`` (of
    the initial value and the floor, as the user set them) go into the error for ``init <= floor``."""

    def __init__(self, init: float, floor: float = 0.0, shape: tuple = (), names=("the initial value", "the floor")):
        super().__init__()
        if init <= floor:
            raise ValueError(f"{names[0]} ({init}) must exceed {names[1]} ({floor})")
        self.floor = floor
        self.raw = nn.Parameter(torch.full(shape, inverse_softplus(init - floor)))

    def forward(self) -> torch.Tensor:
        return self.floor + softplus(self.raw)

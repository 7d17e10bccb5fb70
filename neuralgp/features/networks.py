"""Feature networks φ: R^d → R^r and the constant-norm wrapper."""

from __future__ import annotations

import math

import torch
from torch import nn

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU}


def _activation(name: str) -> nn.Module:
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; use one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]()


NORMS = {"layer": nn.LayerNorm, "batch": nn.BatchNorm1d}


class MLP(nn.Module):
    """``depth`` hidden layers of width ``hidden`` — or, for a sequence ``hidden``, one layer per width — and a
    linear output (the DBK paper's synthetic backbone; DAK's D → 64 → 32 → D_w is ``hidden=(64, 32)``).

    ``norm="layer"`` or ``"batch"`` puts a normalisation between each linear layer and its activation
    (FM-GP's feature map: 2 × 512, ReLU, LayerNorm).
    """

    def __init__(self, in_dim: int, out_dim: int, hidden: int | tuple = 128, depth: int = 2,
                 activation: str = "tanh", norm: str | None = None):
        super().__init__()
        if norm is not None and norm not in NORMS:
            raise ValueError(f"unknown norm {norm!r}; use one of {sorted(NORMS)} or None")
        widths = list(hidden) if isinstance(hidden, (tuple, list)) else [hidden] * depth
        layers, width = [], in_dim
        for w in widths:
            layers += [nn.Linear(width, w)] + ([NORMS[norm](w)] if norm else []) + [_activation(activation)]
            width = w
        layers.append(nn.Linear(width, out_dim))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


class ResNetMLP(nn.Module):
    """Linear→act, then ``depth`` residual blocks h ← h + act(Wh), then a linear output.

    The DBK paper's real-data backbone, a "2-layer ResNet with 128 hidden units", read as two residual
    layers (``depth=2``). Reading it as the input layer plus one block was measured worse on pol and
    protein (docs/benchmarks.md §1)."""

    def __init__(self, in_dim: int, out_dim: int, hidden: int = 128, depth: int = 2, activation: str = "tanh"):
        super().__init__()
        self.inp = nn.Sequential(nn.Linear(in_dim, hidden), _activation(activation))
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(hidden, hidden), _activation(activation))
                                    for _ in range(depth))
        self.out = nn.Linear(hidden, out_dim)

    def forward(self, x):
        h = self.inp(x)
        for block in self.blocks:
            h = h + block(h)
        return self.out(h)


class ImageCNN(nn.Module):
    """Square one-channel images given as flat rows of side² pixels (digits: 8 × 8 = 64 columns) → two 3×3
    convolutions (16, 32 channels, ReLU) → 2×2 max-pooling → a linear layer to ``out_dim``: a small CNN for the
    DAK paper's image experiments at the scale this machine has (the paper's MNIST CNN, scaled to 8 × 8)."""

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        side = math.isqrt(in_dim)
        if side * side != in_dim or side < 2:
            raise ValueError(f"the CNN backbone takes square one-channel images as rows of side² pixels; {in_dim} "
                             f"columns is not a square (use an MLP backbone for tabular data)")
        self.side = side
        self.conv = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1),
                                  nn.ReLU(), nn.MaxPool2d(2), nn.Flatten())
        self.out = nn.Linear(32 * (side // 2) ** 2, out_dim)

    def forward(self, x):
        return self.out(self.conv(x.reshape(-1, 1, self.side, self.side)))


def extractor(backbone: str, in_dim: int, out_dim: int, hidden=(64, 32), activation: str = "relu", depth: int = 2,
              norm: str | None = None) -> nn.Module:
    """The feature network of DAK, its paper's NN and NN+SVGP rows and the plain network classifier: the small image
    CNN (``"cnn"``; the other arguments unused) or an ``MLP`` (``"mlp"``: one layer per ``hidden`` width, or
    ``depth`` layers of an integer width), ending at ``out_dim`` outputs."""
    if backbone == "cnn":
        return ImageCNN(in_dim, out_dim)
    hidden = tuple(hidden) if isinstance(hidden, (tuple, list)) else hidden
    return MLP(in_dim, out_dim, hidden, depth, activation, norm)


BACKBONES = {"mlp": MLP, "resnet": ResNetMLP}


def build_backbone(name: str, in_dim: int, out_dim: int, hidden: int, depth: int, activation: str) -> nn.Module:
    if name not in BACKBONES:
        raise ValueError(f"unknown backbone {name!r}; use one of {sorted(BACKBONES)}")
    if depth < 1 or hidden < 1:
        raise ValueError(f"depth and hidden must be >= 1, got depth={depth}, hidden={hidden}")
    return BACKBONES[name](in_dim, out_dim, hidden=hidden, depth=depth, activation=activation)


class ScaledUnitRows(torch.autograd.Function):
    """φ = s · g/‖g‖ row-wise, with a hand-written backward.

    Autograd's own backward of ``g / g.norm()`` makes about ten n×r temporaries; on a memory-bound
    CPU these cost more than the network's matrix products. Here: ∂g = (s/‖g‖)(∂φ − u (u·∂φ)),
    ∂s = Σ (u·∂φ), with u = g/‖g‖ — three n×r passes.
    """

    @staticmethod
    def forward(ctx, g, scale, eps):
        inv_norm = torch.linalg.vector_norm(g, dim=-1, keepdim=True).clamp_min(eps).reciprocal()
        unit = g * inv_norm
        ctx.save_for_backward(unit, inv_norm, scale)
        return unit * scale

    @staticmethod
    def backward(ctx, grad):
        unit, inv_norm, scale = ctx.saved_tensors
        along = (grad * unit).sum(-1, keepdim=True)
        grad_g = grad.addcmul(unit, along, value=-1.0).mul_(inv_norm * scale)
        return grad_g, along.sum().reshape(scale.shape).to(scale.dtype), None


class ConstantNorm(nn.Module):
    """φ(x) = s · g(x)/‖g(x)‖ with a learned scale s: every input gets prior variance s².

    This is the FM-GP paper's "weak stationarity" normalisation; for DBK it makes the
    variance correction's trace term and diagonal vanish by construction.
    """

    def __init__(self, net: nn.Module, scale_init: float = 1.0, eps: float = 1e-12, learn_scale: bool = True):
        super().__init__()
        self.net = net
        log_scale = torch.tensor(math.log(scale_init))
        if learn_scale:
            self.log_scale = nn.Parameter(log_scale)
        else:  # FM-GP's ψ/‖ψ‖: the kernel's σ_f² carries the scale
            self.register_buffer("log_scale", log_scale)
        self.eps = eps

    def forward(self, x):
        g = self.net(x)
        return ScaledUnitRows.apply(g, torch.exp(self.log_scale).to(g.dtype), self.eps)

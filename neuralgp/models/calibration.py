"""Class probabilities from latent Gaussians and temperature scaling (Guo et al. 2017)."""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.optimize import minimize_scalar


def softmax_samples(mean: torch.Tensor, var_f: torch.Tensor, n_samples: int, seed: int) -> torch.Tensor:
    """Latent draws f ~ N(mean, var_f) per point and class, shape (S, m, C), from the same S fixed standard-normal
    draws for every point, so that a point's probabilities do not depend on the points predicted with it."""
    gen = torch.Generator(device=mean.device).manual_seed(seed)
    eps = torch.randn((n_samples, 1, mean.shape[-1]), generator=gen, dtype=mean.dtype, device=mean.device)
    return mean + var_f.sqrt() * eps


def mc_softmax(f: torch.Tensor, temperature: float) -> torch.Tensor:
    """E[softmax(f/T)] over the sample axis of f (S, m, C): class probabilities (m, C)."""
    return torch.softmax(f / temperature, dim=-1).mean(0)


def fit_temperature(f: torch.Tensor, labels: np.ndarray, bounds=(0.05, 20.0)) -> float:
    """Temperature T minimising the NLL of ``mc_softmax(f, T)`` on labelled points (a bounded 1-D search)."""
    y = torch.as_tensor(labels, device=f.device)

    def nll(log_t):
        p = mc_softmax(f, math.exp(log_t))[torch.arange(len(y)), y]
        return float(-torch.log(p.clamp_min(1e-12)).mean())

    res = minimize_scalar(nll, bounds=tuple(math.log(b) for b in bounds), method="bounded")
    return math.exp(res.x)

"""The DBK paper's 1-D step function (§4.1 / spec §6.2)."""

from __future__ import annotations

import numpy as np
from scipy.special import expit

STEP1D_NOISE_VARIANCE = 0.01


def step1d_function(x) -> np.ndarray:
    """f_gt(x): ≈0.3 on [−1,−0.6), ≈0.9 on (−0.6,0), ≈−0.6 on (0,0.4), ≈0 on (0.4,1], plus a small wiggle."""
    x = np.asarray(x, dtype=np.float64)
    s = lambda t: expit(200.0 * t)  # noqa: E731
    steps = (0.3 * (1 - s(x + 0.6)) + 0.9 * (s(x + 0.6) - s(x))
             - 0.6 * (s(x) - s(x - 0.4)))
    return steps + 0.01 * np.sin(50.0 * np.sin(10.0 * x))


def step1d_sample(n: int, rng: np.random.Generator):
    """n inputs x ~ U[−1, 1] (shape (n, 1)) and noisy targets with noise variance 0.01."""
    x = rng.uniform(-1.0, 1.0, size=(n, 1))
    y = step1d_function(x[:, 0]) + rng.normal(0.0, np.sqrt(STEP1D_NOISE_VARIANCE), size=n)
    return x, y

"""Affine scalers fitted on training data only and stored in fitted models."""

from __future__ import annotations

import numpy as np
import torch

from neuralgp import distributed


class Scaler:
    """x ↦ (x − shift) / scale per column; ``kind`` is "minmax" (to [−1, 1]), "standard" or "none"."""

    KINDS = ("minmax", "standard", "none")

    def __init__(self, kind: str = "standard"):
        if kind not in self.KINDS:
            raise ValueError(f"unknown scaling {kind!r}; use one of {self.KINDS}")
        self.kind = kind

    def fit(self, a: np.ndarray, across_workers: bool = False) -> "Scaler":
        """Fit on the rows ``a``; ``across_workers``: on the rows of every worker of the process group together
        (each passes its own), the same numbers as one fit on all rows up to summation order."""
        a = np.asarray(a, dtype=np.float64)
        reduce = across_workers and distributed.is_distributed()
        if self.kind == "minmax":
            lo, hi = a.min(0), a.max(0)
            if reduce:
                lo = -distributed.maximum(torch.from_numpy(-lo)).numpy()
                hi = distributed.maximum(torch.from_numpy(hi)).numpy()
            shift, scale = (hi + lo) / 2, (hi - lo) / 2
        elif self.kind == "standard" and reduce:  # two passes, as numpy's: the mean, then squared deviations
            n = distributed.total_count(len(a))
            shift = distributed.total(torch.from_numpy(a.sum(0))).numpy() / n
            scale = np.sqrt(distributed.total(torch.from_numpy(((a - shift) ** 2).sum(0))).numpy() / n)
        elif self.kind == "standard":
            n, shift, scale = len(a), a.mean(0), a.std(0)
        else:
            shift, scale = np.zeros(a.shape[1:]), np.ones(a.shape[1:])
        shift, scale = np.asarray(shift, dtype=np.float64), np.asarray(scale, dtype=np.float64)
        constant = scale <= 0
        if self.kind == "standard":  # a constant column's std is round-off, not 0: within the two-pass
            # variance's error bound (Chan, Golub & LeVeque; scikit-learn's StandardScaler uses the same)
            eps = np.finfo(np.float64).eps
            constant |= scale ** 2 <= n * eps * scale ** 2 + (n * shift * eps) ** 2
        # constant columns: leave them centred at 0 instead of dividing by zero (or by round-off)
        self.shift_, self.scale_ = shift, np.where(constant, 1.0, scale)
        return self

    def transform(self, a):
        return (np.asarray(a, dtype=np.float64) - self.shift_) / self.scale_

    def inverse_transform(self, a):
        return np.asarray(a, dtype=np.float64) * self.scale_ + self.shift_

    def state(self) -> dict:
        return {"kind": self.kind, "shift": self.shift_.tolist(), "scale": self.scale_.tolist()}

    @classmethod
    def from_state(cls, state: dict) -> "Scaler":
        s = cls(state["kind"])
        s.shift_ = np.asarray(state["shift"], dtype=np.float64)
        s.scale_ = np.asarray(state["scale"], dtype=np.float64)
        return s

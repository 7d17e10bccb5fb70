"""Optimiser construction shared by all estimators."""

from __future__ import annotations

import torch


def adam(module: torch.nn.Module, network: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.Adam:
    """Adam with (coupled, L2) weight decay on the network's weight matrices only.

    Biases, noise, scales and variational parameters are not decayed (the DBK paper's
    "weight decay 1e-4 on network weights").
    """
    decayed = [p for name, p in network.named_parameters() if name.endswith("weight")]
    ids = {id(p) for p in decayed}
    rest = [p for p in module.parameters() if id(p) not in ids]
    return torch.optim.Adam([{"params": decayed, "weight_decay": weight_decay},
                             {"params": rest, "weight_decay": 0.0}], lr=lr)

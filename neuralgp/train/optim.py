"""Optimiser construction shared by all estimators."""

from __future__ import annotations

import torch


def adam(module: torch.nn.Module, network: torch.nn.Module, lr: float, weight_decay: float,
         own_lr: dict | None = None) -> torch.optim.Adam:
    """Adam with (coupled, L2) weight decay on the network's weight matrices only.

    Biases, noise, scales and variational parameters are not decayed (the DBK paper's
    "weight decay 1e-4 on network weights"). ``own_lr`` maps a submodule name of ``module`` (e.g. "noise")
    to its own learning rate.
    """
    own_lr = own_lr or {}
    decayed = [p for name, p in network.named_parameters() if name.endswith("weight")]
    groups = [{"params": list(getattr(module, name).parameters()), "lr": rate, "weight_decay": 0.0}
              for name, rate in own_lr.items()]
    ids = {id(p) for p in decayed} | {id(p) for g in groups for p in g["params"]}
    rest = [p for p in module.parameters() if id(p) not in ids]
    return torch.optim.Adam([{"params": decayed, "weight_decay": weight_decay},
                             {"params": rest, "weight_decay": 0.0}, *groups], lr=lr, foreach=True)

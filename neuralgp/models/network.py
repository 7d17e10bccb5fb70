"""The non-GP baseline of FM-GP's classification table: the same MLP trained by cross-entropy, then
temperature-scaled on held-out data (Guo et al. 2017)."""

from __future__ import annotations

import torch
from torch import nn

from neuralgp.datasets.scaling import Scaler
from neuralgp.features import MLP
from neuralgp.features.networks import ACTIVATIONS, NORMS
from neuralgp.io import register
from neuralgp.models.base import NeuralGPClassifier
from neuralgp.params import COMMON_RULES, NON_NEGATIVE, NONE, POSITIVE, POSITIVE_INT, one_of
from neuralgp.train import minibatch_epoch, train


@register
class NetworkClassifier(NeuralGPClassifier):
    """MLP (default FM-GP's 2 × 512, ReLU, LayerNorm) → C logits, Adam on mini-batch cross-entropy."""

    param_rules = {"hidden": POSITIVE_INT, "depth": POSITIVE_INT, "activation": one_of(*ACTIVATIONS),
                   "norm": (NONE, one_of(*NORMS)), "max_epochs": POSITIVE_INT, "batch_size": POSITIVE_INT,
                   "lr": POSITIVE, "weight_decay": NON_NEGATIVE, "input_scaling": one_of(*Scaler.KINDS),
                   **COMMON_RULES}

    def __init__(self, hidden=512, depth=2, activation="relu", norm="layer", max_epochs=30, batch_size=256, lr=1e-3,
                 weight_decay=0.0, max_time=None, input_scaling="standard", seed=0, device="cpu", verbose=True):
        self.hidden = hidden
        self.depth = depth
        self.activation = activation
        self.norm = norm
        self.max_epochs = max_epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.max_time = max_time
        self.input_scaling = input_scaling
        self.seed = seed
        self.device = device
        self.verbose = verbose

    def _new_net(self, in_dim: int, n_classes: int) -> nn.Module:
        return MLP(in_dim, n_classes, self.hidden, self.depth, self.activation, self.norm).to(self.device)

    def _fit_scaled(self, X, labels, C):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.net_ = net = self._new_net(X.shape[1], C)
            Xt, yt = self._tensor(X), torch.as_tensor(labels, device=self.device)
            opt = torch.optim.Adam(net.parameters(), lr=self.lr, weight_decay=self.weight_decay)
            gen = torch.Generator().manual_seed(self.seed)
            net.train()

            def epoch():
                return minibatch_epoch(lambda idx: nn.functional.cross_entropy(net(Xt[idx]), yt[idx]), len(yt),
                                       self.batch_size, gen, opt, min_batch=2)

            self.train_log_ = train(net, epoch, self.max_epochs, None, eval_every=1, verbose=self.verbose,
                                    desc="network", unit="epoch", max_seconds=self.max_time)
        net.eval()
        self.n_iter_ = self.train_log_.steps

    def _latent_samples(self, Xs) -> torch.Tensor:
        with torch.no_grad():
            return self.net_(self._tensor(Xs)).unsqueeze(0)  # one "sample": the logits

    def _fitted_state(self) -> dict:
        return {"net": {k: v.cpu() for k, v in self.net_.state_dict().items()}, "n_iter": self.n_iter_}

    def _restore(self, state: dict):
        self.net_ = self._new_net(self.n_features_in_, len(self.classes_))
        self.net_.load_state_dict(state["net"])
        self.net_.eval()
        self.n_iter_ = state["n_iter"]

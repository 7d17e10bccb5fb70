"""Plain-network baselines: FM-GP's classification table (the same MLP trained by cross-entropy, then
temperature-scaled on held-out data, Guo et al. 2017) and DAK's regression "NN" (an MLP trained by the Gaussian
negative log-likelihood with one learned noise variance, its predictive std)."""

from __future__ import annotations

import torch
from torch import nn

from neuralgp.datasets.scaling import Scaler
from neuralgp.features.networks import ACTIVATIONS, NORMS, extractor
from neuralgp.io import register
from neuralgp.models.base import NeuralGPClassifier, NeuralGPRegressor
from neuralgp.params import BOOL, COMMON_RULES, NON_NEGATIVE, NONE, POSITIVE, POSITIVE_INT, int_tuple, one_of
from neuralgp.posterior import GaussianLikelihood, Positive
from neuralgp.train import compiled, minibatch_epoch, train


@register
class NetworkClassifier(NeuralGPClassifier):
    """MLP (default FM-GP's 2 × 512, ReLU, LayerNorm; ``hidden`` a tuple: one layer per width; ``backbone="cnn"``:
    the small image CNN) → C logits, Adam on mini-batch cross-entropy. With ``embedding_dim`` the network ends at
    that many outputs and a linear head maps them to the C logits: DAK's extractor (``hidden=(64, 32),
    embedding_dim=64``) with a plain head, the DAK paper's "NN" row. ``compile=True``: the step through
    torch.compile (``train.compiled``)."""

    param_rules = {"backbone": one_of("mlp", "cnn"), "hidden": (POSITIVE_INT, int_tuple(1)), "depth": POSITIVE_INT,
                   "embedding_dim": (NONE, POSITIVE_INT),
                   "activation": one_of(*ACTIVATIONS), "norm": (NONE, one_of(*NORMS)), "max_epochs": POSITIVE_INT,
                   "compile": BOOL,
                   "batch_size": POSITIVE_INT, "lr": POSITIVE, "weight_decay": NON_NEGATIVE,
                   "input_scaling": one_of(*Scaler.KINDS), **COMMON_RULES}

    def __init__(self, backbone="mlp", hidden=512, depth=2, embedding_dim=None, activation="relu", norm="layer",
                 max_epochs=30, batch_size=256, lr=1e-3, weight_decay=0.0, max_time=None, compile=False,
                 input_scaling="standard", seed=0, device="cpu", verbose=True):
        self.backbone = backbone
        self.hidden = hidden
        self.depth = depth
        self.embedding_dim = embedding_dim
        self.activation = activation
        self.norm = norm
        self.max_epochs = max_epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.max_time = max_time
        self.compile = compile
        self.input_scaling = input_scaling
        self.seed = seed
        self.device = device
        self.verbose = verbose

    def _new_net(self, in_dim: int, n_classes: int) -> nn.Module:
        out = n_classes if self.embedding_dim is None else int(self.embedding_dim)
        net = extractor(self.backbone, in_dim, out, self.hidden, self.activation, self.depth, self.norm)
        if self.embedding_dim is not None:
            net = nn.Sequential(net, nn.Linear(out, n_classes))
        return net.to(self.device)

    def _fit_scaled(self, X, labels, C):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.net_ = net = self._new_net(X.shape[1], C)
            Xt, yt = self._tensor(X), torch.as_tensor(labels, device=self.device)
            opt = torch.optim.Adam(net.parameters(), lr=self.lr, weight_decay=self.weight_decay, foreach=True)
            gen = torch.Generator().manual_seed(self.seed)
            net.train()
            batch_loss = compiled(lambda idx: nn.functional.cross_entropy(net(Xt[idx]), yt[idx]), opt,
                                  self.compile)

            def epoch():
                return minibatch_epoch(batch_loss, len(yt), self.batch_size, gen, opt, min_batch=2)

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


@register
class NetworkRegressor(NeuralGPRegressor):
    """MLP (default DAK's D → 64 → 32 → 64, ReLU) → a linear output, with a learned noise σ² (from 0.1 on
    standardised targets), trained by mini-batch Gaussian NLL with Adam; predicts N(f(x), σ²) — no epistemic
    variance. The DAK paper's "NN" row and the reference for the epoch-time ratio. ``compile=True``: the step
    through torch.compile (``train.compiled``), as for DAK."""

    param_rules = {"hidden": int_tuple(0), "embedding_dim": POSITIVE_INT, "activation": one_of(*ACTIVATIONS),
                   "max_epochs": POSITIVE_INT, "compile": BOOL, "batch_size": POSITIVE_INT, "lr": POSITIVE,
                   "weight_decay": NON_NEGATIVE, "input_scaling": one_of(*Scaler.KINDS), **COMMON_RULES}

    def __init__(self, hidden=(64, 32), embedding_dim=64, activation="relu", max_epochs=100, batch_size=512, lr=1e-3,
                 weight_decay=5e-4, max_time=None, compile=False, input_scaling="standard", seed=0, device="cpu",
                 verbose=True):
        self.hidden = hidden
        self.embedding_dim = embedding_dim
        self.activation = activation
        self.max_epochs = max_epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.max_time = max_time
        self.compile = compile
        self.input_scaling = input_scaling
        self.seed = seed
        self.device = device
        self.verbose = verbose

    def _new_module(self, in_dim: int) -> nn.Module:
        module = nn.Module()
        module.net = nn.Sequential(extractor("mlp", in_dim, self.embedding_dim, self.hidden, self.activation),
                                   nn.Linear(self.embedding_dim, 1))
        module.noise = Positive(0.1, floor=1e-6)
        return module.to(self.device)

    def _fit_scaled(self, X, y, X_val, y_val):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.module_ = m = self._new_module(X.shape[1])
            Xt, yt = self._tensor(X, device=self.device), self._tensor(y, device=self.device)
            opt = torch.optim.Adam(m.parameters(), lr=self.lr, weight_decay=self.weight_decay, foreach=True)
            gen = torch.Generator().manual_seed(self.seed)

            def loss(idx):
                return -GaussianLikelihood(m.noise()).log_prob(yt[idx], m.net(Xt[idx]).squeeze(-1)).mean()

            loss = compiled(loss, opt, self.compile)
            self.train_log_ = train(m, lambda: minibatch_epoch(loss, len(yt), int(self.batch_size), gen, opt),
                                    self.max_epochs, None, eval_every=self.max_epochs, verbose=self.verbose,
                                    desc="network", unit="epoch", max_seconds=self.max_time)
        m.eval()
        self.n_iter_ = self.train_log_.steps

    def _predict_scaled(self, X):
        with torch.no_grad():
            mean = self.module_.net(self._tensor(X, device=self.device)).squeeze(-1).double().cpu().numpy()
            noise = float(self.module_.noise())
        return mean, 0.0 * mean, mean * 0.0 + noise

    @property
    def noise_variance_(self) -> float:
        self._check_fitted()
        return float(self.module_.noise().detach()) * self._y_scale ** 2 * self.variance_scale

    def _fitted_state(self) -> dict:
        return {"module": {k: v.cpu() for k, v in self.module_.state_dict().items()}, "n_iter": self.n_iter_}

    def _restore(self, state: dict):
        self.module_ = self._new_module(self.n_features_in_)
        self.module_.load_state_dict(state["module"])
        self.module_.eval()
        self.n_iter_ = state["n_iter"]

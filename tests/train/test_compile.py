"""``compile=True``: the mini-batch training step through torch.compile gives the eager fit's model, and a build
that fails (no C++ compiler) is an error naming the way out."""

import numpy as np
import pytest
import torch

import neuralgp as ng
from neuralgp.errors import NotFittedError
from neuralgp.train import compiled

SMALL = dict(n_projections=4, grid_level=3, hidden=(16,), embedding_dim=8, max_epochs=3, batch_size=128, lr=1e-2,
             validation_fraction=0, recalibration=False, verbose=False)


def _data(n=300, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    return X, np.sin(X).sum(1) + 0.1 * rng.standard_normal(n)


def test_a_compiled_dak_fit_is_the_eager_fit():
    # 256 rows in batches of 128: one batch shape, so one compile of the loss (each compile costs ~30 s on a cold
    # cache); the custom autograd node of DAK-CF's moments runs inside the compiled graph
    X, y = _data(256)
    eager = ng.DAKRegressor(inference="closed_form", **SMALL).fit(X, y)
    fast = ng.DAKRegressor(inference="closed_form", compile=True, **SMALL).fit(X, y)
    (m0, s0), (m1, s1) = eager.predict(X, return_std=True), fast.predict(X, return_std=True)
    assert np.abs(m0 - m1).max() < 1e-3 * np.abs(m0).max()
    assert np.abs(s0 - s1).max() < 1e-3 * s0.max()
    one_epoch = ng.DAKRegressor(inference="closed_form", **{**SMALL, "max_epochs": 1}).fit(X, y)
    assert not np.allclose(m0, one_epoch.predict(X), atol=1e-3)


def test_a_failed_build_names_the_cause_and_the_way_out(monkeypatch):
    def no_compiler(fn, **_):
        def call(*args):
            raise torch._dynamo.exc.BackendCompilerFailed(fn, RuntimeError("No working C++ compiler found"), None)
        return call

    monkeypatch.setattr(torch, "compile", no_compiler)
    X, y = _data(60)
    model = ng.NetworkRegressor(max_epochs=1, compile=True, verbose=False)
    with pytest.raises(RuntimeError, match="No working C.. compiler found.*compile=False"):
        model.fit(X, y)
    with pytest.raises(NotFittedError):  # no half-fitted model left behind
        model.predict(X)


def test_disabled_is_the_loss_itself():
    def loss(idx):
        return idx.sum()

    optimizer = torch.optim.Adam([torch.zeros(1, requires_grad=True)])
    assert compiled(loss, optimizer, False) is loss and "step" not in vars(optimizer)

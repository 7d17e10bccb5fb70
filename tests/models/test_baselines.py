"""GPyTorch peers: same estimator contract, and the exact GP equals scikit-learn's with the same hyper-parameters."""

import math
import warnings

import numpy as np
import pytest
import torch
from gpytorch.utils.warnings import GPInputWarning
from sklearn.base import clone
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

import neuralgp
from neuralgp.models import (DKLRegressor, ExactGPRegressor, GPyTorchDBKRegressor, GridSVDKLRegressor,
                             ResourceLimitError, SGPRRegressor, SparseDKLRegressor, SVDKLRegressor, SVGPRegressor)

ALL = [ExactGPRegressor, SGPRRegressor, SVGPRegressor, DKLRegressor, SparseDKLRegressor, SVDKLRegressor,
       GridSVDKLRegressor, GPyTorchDBKRegressor]
FAST = dict(max_iter=30, max_epochs=4, lr=1e-2, num_inducing=16, hidden=16, verbose=False)


def toy(n=150, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, 3))
    return X, np.sin(2 * X[:, 0]) + 0.3 * X[:, 1] + 0.1 * rng.normal(size=n) + 1.0


def test_exact_gp_matches_scikit_learn_with_the_fitted_hyperparameters():
    X, y = toy()
    model = ExactGPRegressor(max_iter=50, lr=0.05, verbose=False).fit(X, y)
    Xs = model.x_scaler_.transform(X)
    ys = (y - model.y_scaler_.shift_[0]) / model.y_scaler_.scale_[0]
    kern = model.model_.covar_module
    ls = kern.base_kernel.lengthscale.detach().numpy().ravel().astype(float)
    noise = float(model.likelihood_.noise)
    sk = GaussianProcessRegressor(ConstantKernel(float(kern.outputscale), "fixed") * RBF(ls, "fixed")
                                  + WhiteKernel(noise, "fixed"), optimizer=None).fit(Xs, ys)
    X_new = np.random.default_rng(3).uniform(-2, 2, (20, 3))
    sk_mean, sk_std = sk.predict(model.x_scaler_.transform(X_new), return_std=True)  # includes the white noise
    mean, std = model.predict(X_new, return_std=True)
    scale = model.y_scaler_.scale_[0]
    np.testing.assert_allclose(mean, sk_mean * scale + model.y_scaler_.shift_[0], atol=2e-3 * scale)
    np.testing.assert_allclose(std, sk_std * scale, rtol=2e-2)


@pytest.mark.parametrize("cls", ALL)
def test_fit_predict_save_load(cls, tmp_path):
    X, y = toy()
    model = cls(**FAST).fit(X, y, X[:30], y[:30])
    mean, std = model.predict(X[:10], return_std=True)
    assert np.all(np.isfinite(mean)) and np.all(std > 0) and model.noise_variance_ > 0
    loaded = neuralgp.load(model.save(tmp_path / "m.pt"))
    for a, b in zip((mean, std), loaded.predict(X[:10], return_std=True)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    stored = torch.load(tmp_path / "m.pt", weights_only=True)["fitted"]
    assert ("train_X" in stored) == model.keeps_training_data
    assert clone(model).get_params() == model.get_params()
    with warnings.catch_warnings():  # at the training inputs: no GPyTorch "did you forget model.train()?"
        warnings.simplefilter("error", GPInputWarning)
        model.predict(X)


def test_memory_guard_refuses_big_exact_gps():
    X, y = toy(n=200)
    model = ExactGPRegressor(max_memory_gb=1e-4, **FAST)
    with pytest.raises(ResourceLimitError, match="needs about .* GB"):
        model.fit(X, y)
    assert not hasattr(model, "x_scaler_")
    SGPRRegressor(max_memory_gb=1e-4, **FAST).fit(X, y)  # sparse models are not limited by n²


def test_deep_kernel_feature_dimensions():
    X, y = toy()
    assert DKLRegressor(**FAST).fit(X, y).model_.covar_module.base_kernel.lengthscale.shape == (1, 2)
    assert GPyTorchDBKRegressor(**FAST).fit(X, y).model_.feature.out.out_features == 128


def test_grid_svdkl_is_a_mixed_sum_of_one_dimensional_grid_gps_on_squashed_network_outputs():
    """f(x) = Σ_p a_p g_p(σ(h_p(x))) with independent 1-D GPs g_p on fixed grids over [0, 1]: the predictive
    marginals are Σ a_p m_p and Σ a_p² v_p (+ GPyTorch's jitter) of the P grid GPs, each at its own network
    output."""
    X, y = toy()
    model = GridSVDKLRegressor(feature_dim=3, **FAST).fit(X, y)
    strategy = model.model_.gp.variational_strategy
    grid = strategy.base_variational_strategy
    assert grid.inducing_points.shape == (16, 1) and float(grid.inducing_points.min()) <= 0.0 < 1.0 <= float(
        grid.inducing_points.max())
    Xt = model._as_tensor(model.x_scaler_.transform(X[:7]))
    with torch.no_grad():
        f = model.model_(Xt)
        h = torch.sigmoid(model.model_.feature(Xt))  # (7, P)
        g = grid(h.T.unsqueeze(-1))  # P independent GPs, each on its own coordinate
        a = strategy.lmc_coefficients[:, 0]
        torch.testing.assert_close(f.mean, (a[:, None] * g.mean).sum(0))
        jitter = strategy.jitter_val  # GPyTorch's LMC adds it to the mixed covariance
        torch.testing.assert_close(f.variance, (a[:, None] ** 2 * g.variance).sum(0) + jitter)
        # one network output moved: only its own term changes
        h2 = h.clone()
        h2[:, 0] = 0.5
        g2 = grid(h2.T.unsqueeze(-1))
        torch.testing.assert_close(g2.mean[1:], g.mean[1:])
        assert not torch.allclose(g2.mean[0], g.mean[0])


def test_float64_option():
    X, y = toy()
    model = ExactGPRegressor(dtype="float64", **FAST).fit(X, y)
    assert model.model_.covar_module.outputscale.dtype == torch.float64
    assert np.all(np.isfinite(model.predict(X[:5])))


def test_exact_step_redone_without_preconditioner_when_it_breaks_down(monkeypatch):
    import gpytorch
    original = gpytorch.mlls.ExactMarginalLogLikelihood.forward

    def nan_when_preconditioned(self, *args, **kwargs):  # what GPyTorch's float32 preconditioner does to DKL on pol
        value = original(self, *args, **kwargs)
        return value * math.nan if gpytorch.settings.max_preconditioner_size.value() > 0 else value

    monkeypatch.setattr(gpytorch.mlls.ExactMarginalLogLikelihood, "forward", nan_when_preconditioned)
    X, y = toy()
    model = ExactGPRegressor(max_iter=5, verbose=False).fit(X, y)
    assert model.unpreconditioned_steps_ == model.n_iter_ == 5
    assert np.isfinite(model.predict(X)).all()


def test_deprecated_gpnn_name_warns_and_is_the_same_estimator():
    from neuralgp import GPnnRegressor, NNGPRegressor
    with pytest.warns(FutureWarning, match="GPnnRegressor"):
        old = NNGPRegressor(n_neighbors=7)
    assert isinstance(old, GPnnRegressor) and old.get_params() == GPnnRegressor(n_neighbors=7).get_params()


def test_gpnn_leave_one_out_leaves_out_the_row_itself_not_a_copy():
    """With copies of an input, each training row's leave-one-out prediction is GPnn on the other rows."""
    from neuralgp import GPnnRegressor
    g = np.random.default_rng(3)
    base = g.standard_normal((40, 2))
    Xc = np.vstack([base, base[:5]])
    yc = np.sin(Xc[:, 0]) + 0.1 * g.standard_normal(45)
    model = GPnnRegressor(n_neighbors=8, max_iter=3, input_scaling="none", normalize_y=False, validation_fraction=0.0,
                          verbose=False).fit(Xc, yc)
    loo = model._predict_scaled(Xc, exclude_self=True)[0]
    for i in (0, 2, 41):
        model._index(np.delete(Xc, i, 0), np.delete(yc, i))
        assert np.isclose(loo[i], model._predict_scaled(Xc[[i]])[0][0], atol=1e-10)


@pytest.mark.parametrize("n, patience", [(100, 2000), (2560, 200), (1000, 500)])
def test_svgp_patience_is_at_least_2000_steps_and_200_epochs(monkeypatch, n, patience):
    # on a small set an epoch is one step: 200 epochs stopped SVGP at its start (uci/breastcancer: RMSE 1.07)
    import neuralgp.models.baselines as baselines
    seen = []

    def spy(*args, **kwargs):
        seen.append(kwargs["patience"])
        raise StopIteration
    monkeypatch.setattr(baselines, "train", spy)
    X = np.random.default_rng(0).standard_normal((n, 2))
    with pytest.raises(StopIteration):
        SVGPRegressor(batch_size=256, verbose=False).fit(X, X[:, 0])
    assert seen == [patience]
    seen.clear()
    with pytest.raises(StopIteration):
        SVGPRegressor(batch_size=256, patience=7, verbose=False).fit(X, X[:, 0])
    assert seen == [7]

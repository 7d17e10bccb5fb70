"""SklearnGPRegressor: scikit-learn's GP behind neuralgp's interface."""

import numpy as np
import pytest
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
from sklearn.preprocessing import StandardScaler

import neuralgp
from neuralgp.errors import ResourceLimitError
from neuralgp.models import SklearnGPRegressor


def _data(n=80, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, 2))
    return X, np.sin(2 * X[:, 0]) + X[:, 1] + 0.1 * rng.normal(size=n) + 3.0


def test_predictions_equal_scikit_learn_on_standardised_data():
    X, y = _data()
    model = SklearnGPRegressor(n_restarts_optimizer=0, verbose=False).fit(X, y)
    xs, ys = StandardScaler().fit(X), StandardScaler().fit(y[:, None])
    ref = GaussianProcessRegressor(ConstantKernel(1.0) * RBF(np.ones(2)) + WhiteKernel(1.0), alpha=1e-10,
                                   n_restarts_optimizer=0, random_state=0)
    ref.fit(xs.transform(X), ys.transform(y[:, None])[:, 0])
    X_star = np.random.default_rng(1).uniform(-3, 3, (20, 2))
    mean, std = model.predict(X_star, return_std=True)
    r_mean, r_std = ref.predict(xs.transform(X_star), return_std=True)
    np.testing.assert_allclose(mean, ys.inverse_transform(r_mean[:, None])[:, 0], rtol=1e-8)
    np.testing.assert_allclose(std, r_std * ys.scale_[0], rtol=1e-8)
    assert model.noise_variance_ == pytest.approx(ref.kernel_.k2.noise_level * ys.scale_[0] ** 2)


def test_validation_part_joins_training_and_save_load_round_trips(tmp_path):
    X, y = _data()
    model = SklearnGPRegressor(n_restarts_optimizer=0).fit(X[:60], y[:60], X[60:], y[60:])
    assert len(model.gpr_.X_train_) == 80
    path = model.save(tmp_path / "gp.pt")
    loaded = neuralgp.load(path)
    np.testing.assert_allclose(loaded.predict(X, return_std=True), model.predict(X, return_std=True), rtol=1e-9)


def test_one_lengthscale_fits_scikit_learns_isotropic_rbf_and_round_trips(tmp_path):
    X, y = _data()
    model = SklearnGPRegressor(n_restarts_optimizer=0, ard=False, verbose=False).fit(X, y)
    assert np.ndim(model.kernel_.k1.k2.length_scale) == 0
    xs, ys = StandardScaler().fit(X), StandardScaler().fit(y[:, None])
    ref = GaussianProcessRegressor(ConstantKernel(1.0) * RBF(1.0) + WhiteKernel(1.0), alpha=1e-10,
                                   n_restarts_optimizer=0, random_state=0)
    ref.fit(xs.transform(X), ys.transform(y[:, None])[:, 0])
    np.testing.assert_allclose(model.predict(X), ys.inverse_transform(ref.predict(xs.transform(X))[:, None])[:, 0],
                               rtol=1e-8)
    loaded = neuralgp.load(model.save(tmp_path / "gp.pt"))
    np.testing.assert_allclose(loaded.predict(X, return_std=True), model.predict(X, return_std=True), rtol=1e-9)


def test_too_many_rows_is_a_clear_error_before_work():
    X, y = _data(50)
    with pytest.raises(ResourceLimitError, match="max_train_size = 40.*sgpr, svgp, dbk"):
        SklearnGPRegressor(max_train_size=40).fit(X, y)

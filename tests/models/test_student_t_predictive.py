"""predictive="student_t": the recalibrated variance, a t's shape fitted to the held-out z-scores that set α."""

import numpy as np
import pytest
import torch

from neuralgp import DAKRegressor, DBKRegressor, DKMRegressor, FMGPRegressor, load
from neuralgp.errors import ParameterError
from neuralgp.metrics import coverage, nll
from neuralgp.models.base import MAX_DF, student_t_df

DBK = dict(rank=16, hidden=32, max_iter=120, eval_every=10, verbose=False, lr=1e-2)


def toy(n, seed=0, noise="t"):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, 2))
    eps = 0.1 * (rng.standard_t(2.5, n) if noise == "t" else rng.standard_normal(n))
    return X, np.sin(3 * X[:, 0]) + eps


def test_nu_is_fitted_after_alpha_on_the_validation_z_scores():
    X, y = toy(300)
    X_val, y_val = toy(150, seed=1)
    gauss = DBKRegressor(**DBK, predictive="gaussian").fit(X, y, X_val, y_val)
    t = DBKRegressor(**DBK).fit(X, y, X_val, y_val)  # the default
    assert gauss.predictive_df is None and t.recalibrated_by_ == "validation"
    # the same fit: the shape does not touch the mean or the variance
    np.testing.assert_allclose(t.predict(X_val), gauss.predict(X_val))
    assert t.variance_scale == pytest.approx(gauss.variance_scale, rel=1e-12)
    mean, std = gauss.predict(X_val, return_std=True)
    assert t.predictive_df == pytest.approx(student_t_df((y_val - mean) / std), rel=1e-9)
    assert t.predictive_df < 10  # heavy-tailed noise
    X_test, y_test = toy(400, seed=2)
    m, s = t.predict(X_test, return_std=True)
    assert nll(y_test, m, s, t.predictive_df) < nll(y_test, m, s)  # the t's density is the better one here
    lo, hi = t.predict_interval(X_test)
    assert np.mean((y_test >= lo) & (y_test <= hi)) == coverage(y_test, m, s, 0.95, t.predictive_df)
    assert t.predict_dist(X_test)["df"] == t.predictive_df


def test_gaussian_noise_gives_a_large_nu():
    X, y = toy(300, noise="gaussian")
    X_val, y_val = toy(300, seed=1, noise="gaussian")
    model = DBKRegressor(**DBK, predictive="student_t").fit(X, y, X_val, y_val)
    assert model.predictive_df > 20 or model.predictive_df == pytest.approx(MAX_DF)


@pytest.mark.cross_fit
def test_cross_fitted_alpha_fits_nu_on_the_out_of_fold_z_scores(monkeypatch):
    seen = {}
    original = DBKRegressor._cross_fit_z2

    def spy(self, *args):
        seen["z2"] = original(self, *args)
        return seen["z2"]

    monkeypatch.setattr(DBKRegressor, "_cross_fit_z2", spy)
    model = DBKRegressor(**DBK, validation_fraction=0.2, predictive="student_t", bagging=0).fit(*toy(120))
    assert model.recalibrated_by_ == "cross_fit"
    assert model.predictive_df == pytest.approx(student_t_df(np.sqrt(seen["z2"] / model.variance_scale)), rel=1e-9)


def test_recalibrate_refits_nu_and_save_load_keeps_it(tmp_path):
    X, y = toy(200)
    X_cal, y_cal = toy(100, seed=3)
    model = FMGPRegressor(hidden=32, feature_dim=8, max_iter=50, verbose=False, validation_fraction=0.0,
                          predictive="student_t").fit(X, y)
    assert model.predictive_df is None  # nothing held out: no α, no shape
    model.recalibrate(X_cal, y_cal)
    mean, std = model.predict(X_cal, return_std=True)
    assert model.predictive_df == pytest.approx(student_t_df((y_cal - mean) / std), rel=1e-9)
    model.save(tmp_path / "m.pt")
    loaded = load(tmp_path / "m.pt")
    assert loaded.predictive_df == model.predictive_df and loaded.predictive == "student_t"
    np.testing.assert_array_equal(loaded.predict_interval(X_cal)[0], model.predict_interval(X_cal)[0])


def test_fmgp_defaults_to_the_t_and_a_file_from_before_the_option_loads_as_the_gaussian_it_was(tmp_path):
    X, y = toy(200)
    model = FMGPRegressor(hidden=32, feature_dim=8, max_iter=50, verbose=False).fit(X, y)
    assert model.predictive == "student_t" and model.predictive_df is not None
    gauss = FMGPRegressor(hidden=32, feature_dim=8, max_iter=50, verbose=False, predictive="gaussian").fit(X, y)
    assert gauss.predictive_df is None
    gauss.save(tmp_path / "g.pt")
    payload = torch.load(tmp_path / "g.pt", weights_only=True)
    del payload["params"]["predictive"]  # as saved before the parameter existed
    torch.save(payload, tmp_path / "old.pt")
    old = load(tmp_path / "old.pt")
    assert old.predictive == "gaussian" and old.predictive_df is None
    assert load(tmp_path / "g.pt").predictive == "gaussian"


@pytest.mark.parametrize("cls, params", [
    (DAKRegressor, dict(hidden=(16,), embedding_dim=8, n_projections=4, max_epochs=20, max_iter=20, verbose=False)),
    (DKMRegressor, dict(widths=(20, 20), max_iter=2, verbose=False)),
])
def test_every_recalibrating_regressor_defaults_to_it(cls, params):
    model = cls(**params).fit(*toy(150))
    assert model.predictive_df is not None and np.isfinite(model.predictive_df)
    with pytest.raises(ParameterError, match="predictive"):
        cls(**params, predictive="laplace").fit(*toy(150))

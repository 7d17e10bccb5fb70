"""A bag of half-data fits (``bagging``): members, their combined predictive, α from the out-of-bag rows."""

import numpy as np
import pytest

from neuralgp import DAKRegressor, DBKRegressor, load
from neuralgp.datasets.rows import ArrayRows
from neuralgp.errors import InputError, ParameterError
from neuralgp.models.base import (AUTO_BAG_MEMBERS, CROSS_FIT_BELOW, bag_z2, halves_can_vary, recalibration_scale,
                                 varying_halves, winsorised, z2_moments)

SMALL = dict(rank=16, hidden=32, max_iter=120, eval_every=10, verbose=False, lr=1e-2, validation_fraction=0.2)


def toy(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, 2))
    return X, np.sin(3 * X[:, 0]) + 0.1 * rng.standard_t(3, n)


@pytest.fixture(scope="module")
def bag():
    X, y = toy(100)
    return X, y, DBKRegressor(**SMALL, bagging=4).fit(X, y)


def test_members_are_fixed_budget_refits_on_complementary_halves_with_the_out_of_bag_alpha(bag):
    X, y, model = bag
    assert model.recalibrated_by_ == "bag" and len(model.members_) == 4
    X_tr, y_tr, X_val, y_val = model._hold_out_validation(X, y)
    rows_X, rows_y = np.concatenate([X_tr, X_val]), np.concatenate([y_tr, y_val])
    rng, steps = np.random.default_rng(0), model.train_log_.best_step
    oob_mean, oob_var = np.empty((2, 100)), np.empty((2, 100))
    for pair in range(2):
        halves = np.array_split(rng.permutation(100), 2)
        for side, kept in enumerate(halves):
            member = DBKRegressor(**{**SMALL, "max_iter": steps, "validation_fraction": 0.0, "recalibration": False,
                                     "seed": 2 * pair + side}).fit(rows_X[kept], rows_y[kept])
            np.testing.assert_allclose(member.predict(X), model.members_[2 * pair + side].predict(X), rtol=1e-6)
            dist = member.predict_dist(rows_X[halves[1 - side]])
            oob_mean[pair, halves[1 - side]], oob_var[pair, halves[1 - side]] = dist["mean"], dist["var_y"]
    z2, _ = bag_z2(rows_y, oob_mean, oob_var)
    assert model.variance_scale_ == pytest.approx(recalibration_scale(*z2_moments(winsorised(z2))), rel=1e-6)


def test_the_bag_predicts_its_members_mean_and_variance_plus_spread_times_alpha(bag):
    X, _, model = bag
    dists = [m.predict_dist(X[:7]) for m in model.members_]
    means = np.stack([d["mean"] for d in dists])
    mean, std = model.predict(X[:7], return_std=True)
    np.testing.assert_allclose(mean, means.mean(0))
    var_y = model.variance_scale * (np.mean([d["var_y"] for d in dists], 0) + means.var(0))
    np.testing.assert_allclose(std ** 2, var_y)
    assert model.predict_dist(X[:7])["df"] == model.predictive_df


@pytest.mark.parametrize("noise, member_var, shared", [(1.0, 1.0, 0.5), (0.1, 1.0, 0.1), (1.0, 3.0, 0.0)])
def test_bag_z2_predicts_the_whole_bags_z2_where_the_out_of_bag_ensembles_do_not(noise, member_var, shared):
    """y = noise; members err by a shared bias per row plus their own noise and know the noise variance. The bag of
    M = 8 on fresh rows has a smaller mean z² than the out-of-bag ensembles of 4 (by 18–52 % here); bag_z2's α-z²
    land within 12 %."""
    rng, k, n = np.random.default_rng(1), 4, 100_000

    def rows(members):
        y = rng.normal(0.0, np.sqrt(noise), n)
        means = rng.normal(0.0, np.sqrt(shared), n) + rng.normal(0.0, np.sqrt(member_var), (members, n))
        return y, means, np.full((members, n), noise)

    y, means, variances = rows(2 * k)
    bag = np.mean((y - means.mean(0)) ** 2 / (variances.mean(0) + means.var(0)))
    z2, plain = bag_z2(*rows(k))
    assert z2.mean() == pytest.approx(bag, rel=0.12)
    assert plain.mean() > 1.15 * bag
    np.testing.assert_allclose(z2 / plain, z2[0] / plain[0])  # one factor over all rows


def test_alpha_caps_the_top_percent_of_z2_so_a_few_far_rows_do_not_set_it():
    rng = np.random.default_rng(0)
    gaussian = rng.standard_normal(300) ** 2
    assert winsorised(gaussian).mean() == pytest.approx(gaussian.mean(), rel=0.05)  # within 2 % in expectation
    tail = gaussian.copy()
    tail[:3] = 400.0  # three rows that half-data members miss by 20 standard deviations
    assert tail.mean() > 4 * gaussian.mean()
    assert winsorised(tail).max() == pytest.approx(np.quantile(tail, 0.99))
    assert winsorised(tail).mean() < 1.3 * gaussian.mean()
    np.testing.assert_array_equal(winsorised(gaussian)[gaussian < np.quantile(gaussian, 0.99)],
                                  gaussian[gaussian < np.quantile(gaussian, 0.99)])


def test_save_and_load_keep_the_members(bag, tmp_path):
    X, _, model = bag
    model.save(tmp_path / "bag.pt")
    loaded = load(tmp_path / "bag.pt")
    assert len(loaded.members_) == 4
    np.testing.assert_allclose(loaded.predict(X, return_std=True), model.predict(X, return_std=True))


def test_bag_refusals(bag):
    X, y, model = bag
    with pytest.raises(InputError, match="bagging=0"):
        model.fit_posterior(ArrayRows(X, y))
    with pytest.raises(InputError, match="members_"):
        model.features(X)
    for bad in (1, 3, -2, True, 2.0, "yes"):
        with pytest.raises(ParameterError, match="bagging"):
            DBKRegressor(bagging=bad).fit(X, y)
    with pytest.raises(InputError, match="recalibration"):
        DBKRegressor(**SMALL, bagging=2, recalibration="validation").fit(X, y)
    with pytest.raises(InputError, match="at least 4"):
        DBKRegressor(**SMALL, bagging=2).fit(X[:3], y[:3])
    one_off = np.r_[np.zeros(39), 1.0]  # every split leaves one half with constant targets
    with pytest.raises(InputError, match="1 off it; use bagging=0"):
        DBKRegressor(**SMALL, bagging=2).fit(X[:40], one_off)


@pytest.mark.cross_fit
def test_count_targets_get_halves_that_vary_and_auto_cross_fits_where_none_can():
    rng = np.random.default_rng(0)
    counts = (rng.uniform(size=24) < 0.15).astype(float)  # mostly 0, as uci/challenger's O-ring failures
    counts[:2] = 1.0
    assert halves_can_vary(counts)
    for _ in range(50):
        assert all(np.ptp(counts[half]) > 0 for half in varying_halves(counts, rng))
    assert not halves_can_vary(np.r_[np.zeros(39), 1.0]) and not halves_can_vary(np.array([0.0, 1.0, 2.0]))
    # one off-mode row in all 40: no bag, and no cross-fit (the fold that holds it out is constant)
    X, y = toy(40)[0], np.r_[np.zeros(31), 1.0, np.zeros(8)]
    model = DBKRegressor(**{**SMALL, "max_iter": 20}, bagging="auto").fit(X[:32], y[:32], X[32:], y[32:])
    assert not hasattr(model, "members_") and getattr(model, "recalibrated_by_", None) != "cross_fit"


def test_a_failing_member_leaves_no_half_fitted_bag(monkeypatch):
    X, y = toy(40)
    model = DBKRegressor(**SMALL, bagging=2)
    real_fit, calls = DBKRegressor.fit, []

    def fit(self, *args):  # the bag's first member fails
        calls.append(self.bagging)
        if len(calls) == 2:
            raise FloatingPointError("Cholesky failed")
        return real_fit(self, *args)

    monkeypatch.setattr(DBKRegressor, "fit", fit)
    with pytest.raises(FloatingPointError):
        model.fit(X, y)
    assert calls == [2, 0] and not hasattr(model, "x_scaler_") and not hasattr(model, "members_")


def test_a_refit_without_bagging_drops_the_members(bag):
    X, y, _ = bag
    model = DBKRegressor(**SMALL, bagging=2).fit(X, y)
    model.set_params(bagging=0).fit(X, y)
    assert not hasattr(model, "members_") and model.recalibrated_by_ != "bag"


@pytest.mark.cross_fit  # the library's cross-fitting threshold, which "auto" follows (conftest.py)
def test_auto_bags_exactly_where_alpha_would_be_cross_fitted():
    X, y = toy(100 + CROSS_FIT_BELOW)
    params = {**SMALL, "max_iter": 20, "bagging": "auto"}
    small = DBKRegressor(**params).fit(X[:101], y[:101], X[101:], y[101:])  # 99 validation rows
    assert small.recalibrated_by_ == "bag" and len(small.members_) == AUTO_BAG_MEMBERS
    large = DBKRegressor(**params).fit(X[:100], y[:100], X[100:], y[100:])
    assert large.recalibrated_by_ == "validation" and not hasattr(large, "members_")
    for other in ({"recalibration": "validation"}, {"recalibration": False}):  # no cross-fitting, no bag
        assert not hasattr(DBKRegressor(**{**params, **other}).fit(X[:101], y[:101], X[101:], y[101:]), "members_")


@pytest.mark.cross_fit
def test_exact_dbk_bags_by_default_where_alpha_would_be_cross_fitted_svdbk_does_not():
    X, y = toy(120)
    params = {**SMALL, "max_iter": 20}
    del params["validation_fraction"]
    assert DBKRegressor().bagging == "auto"
    model = DBKRegressor(**params).fit(X[:100], y[:100], X[100:], y[100:])  # 20 validation rows
    assert model.recalibrated_by_ == "bag" and len(model.members_) == AUTO_BAG_MEMBERS
    svi = DBKRegressor(**params, inference="svi", batch_size=32, max_epochs=5).fit(X[:100], y[:100], X[100:], y[100:])
    assert svi.recalibrated_by_ == "cross_fit" and not hasattr(svi, "members_")


def test_dak_bags_its_mini_batch_fits_for_as_many_steps(tmp_path):
    X, y = toy(100)
    model = DAKRegressor(inference="closed_form", n_projections=4, hidden=(16,), embedding_dim=8, batch_size=16,
                         max_epochs=40, eval_every=5, lr=1e-2, validation_fraction=0.2, verbose=False,
                         bagging=2).fit(X, y)
    assert model.recalibrated_by_ == "bag" and len(model.members_) == 2
    # 80 training rows are 5 batches of 16 an epoch, a half of all 100 rows 4: as many steps in 5/4 the epochs
    assert {m.max_epochs for m in model.members_} == {round(model.train_log_.best_step * 5 / 4)}
    model.save(tmp_path / "dak-bag.pt")
    np.testing.assert_allclose(load(tmp_path / "dak-bag.pt").predict(X, return_std=True),
                               model.predict(X, return_std=True))

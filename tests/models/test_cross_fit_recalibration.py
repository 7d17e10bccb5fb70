"""Cross-fitted recalibration: on a small validation part, α comes from the out-of-fold z-scores of all rows."""

import warnings

import numpy as np
import pytest
import torch

from neuralgp import DAKRegressor, DBKRegressor, FMGPRegressor
from neuralgp.errors import ParameterError
from neuralgp.models.base import CROSS_FIT_BELOW, CROSS_FIT_FOLDS, recalibration_scale

pytestmark = pytest.mark.cross_fit  # the library's default, not the suite's validation-part rule (conftest.py)

# bagging=0: the single fit, whose α these tests check (by default exact DBK bags where α would be cross-fitted)
SMALL = dict(rank=16, hidden=32, max_iter=150, eval_every=10, verbose=False, lr=1e-2, validation_fraction=0.2,
             bagging=0, init_hyperparameters=False)  # the start of before the fitted one: these test the refits


def toy(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, 2))
    return X, np.sin(3 * X[:, 0]) + 0.1 * rng.standard_t(3, n)


def test_alpha_is_the_out_of_fold_z2_of_refits_for_the_kept_steps():
    X, y = toy(120)
    model = DBKRegressor(**SMALL).fit(X, y)  # 24 held-out rows: below CROSS_FIT_BELOW
    assert model.recalibrated_by_ == "cross_fit" and model.selection_optimism_ == 1.0
    X_tr, y_tr, X_val, y_val = model._hold_out_validation(X, y)
    rows_X, rows_y = np.concatenate([X_tr, X_val]), np.concatenate([y_tr, y_val])
    z2 = np.empty(len(rows_y))
    steps = model.train_log_.best_step
    assert 0 < steps < 150  # early stopping chose it
    for held in np.array_split(np.random.default_rng(0).permutation(len(rows_y)), CROSS_FIT_FOLDS):
        kept = np.setdiff1d(np.arange(len(rows_y)), held)
        # the same model, trained on the other folds for the steps early stopping kept, neither validated nor scaled
        fold = DBKRegressor(**{**SMALL, "max_iter": steps, "validation_fraction": 0.0, "recalibration": False})
        mean, std = fold.fit(rows_X[kept], rows_y[kept]).predict(rows_X[held], return_std=True)
        z2[held] = ((rows_y[held] - mean) / std) ** 2
    assert model.variance_scale_ == pytest.approx(recalibration_scale(z2.mean(), (z2 ** 2).mean(), len(z2)),
                                                  rel=1e-9)


def test_a_large_validation_part_recalibrates_on_itself():
    X, y = toy(100 + CROSS_FIT_BELOW)
    params = {**SMALL, "max_iter": 20}
    assert DBKRegressor(**params).fit(X[:100], y[:100], X[100:], y[100:]).recalibrated_by_ == "validation"
    assert DBKRegressor(**params).fit(X[:101], y[:101], X[101:], y[101:]).recalibrated_by_ == "cross_fit"


def test_recalibration_validation_keeps_the_validation_rule_and_false_none():
    X, y = toy(120)
    assert DBKRegressor(**{**SMALL, "recalibration": "validation"}).fit(X, y).recalibrated_by_ == "validation"
    off = DBKRegressor(**{**SMALL, "recalibration": False}).fit(X, y)
    assert off.variance_scale == 1.0 and not hasattr(off, "recalibrated_by_")
    with pytest.raises(ParameterError, match="recalibration"):
        DBKRegressor(recalibration="cv").fit(X, y)


def test_a_failing_refit_falls_back_to_the_validation_part(monkeypatch):
    class Failing:
        def fit(self, X, y):
            raise FloatingPointError("Cholesky failed")

    monkeypatch.setattr(DBKRegressor, "_fixed_budget_clone", lambda self, *rows: Failing())
    model = DBKRegressor(**SMALL).fit(*toy(120))
    assert model.recalibrated_by_ == "validation" and model.variance_scale != 1.0


def test_zero_steps_keep_the_initial_feature_map():
    X, y = toy(60)
    model = DBKRegressor(**{**SMALL, "max_iter": 0, "validation_fraction": 0.0}).fit(X, y)
    fresh = DBKRegressor(**SMALL)
    torch.manual_seed(0)
    initial = fresh.build_module(2)
    assert model.n_iter_ == 0
    for a, b in zip(model.module_.state_dict().values(), initial.state_dict().values()):
        assert torch.equal(a, b)
    with pytest.raises(ParameterError, match="max_iter"):
        DBKRegressor(max_iter=-1).fit(X, y)


def test_dak_bags_by_default_cross_fits_without_the_bag_unless_fine_tuned():
    X, y = toy(120)
    params = dict(max_epochs=20, max_iter=20, eval_every=5, verbose=False, validation_fraction=0.2)
    assert DAKRegressor(**params).fit(X, y).recalibrated_by_ == "bag"  # bagging="auto" where α would cross-fit
    assert DAKRegressor(**params, bagging=0).fit(X, y).recalibrated_by_ == "cross_fit"
    # fine-tuning's pre-training also runs max_epochs, which early stopping did not choose
    assert DAKRegressor(**params, finetune=True).fit(X, y).recalibrated_by_ == "validation"


def test_fmgp_cross_fits_alpha_with_refits_of_its_fixed_budget():
    X, y = toy(120)
    small = dict(feature_dim=8, hidden=32, max_iter=30, verbose=False, validation_fraction=0.2)
    model = FMGPRegressor(**small).fit(X, y)  # 24 held-out rows: below CROSS_FIT_BELOW
    assert model.recalibrated_by_ == "cross_fit" and model.n_iter_ == 30
    X_tr, y_tr, X_val, y_val = model._hold_out_validation(X, y)
    rows_X, rows_y = np.concatenate([X_tr, X_val]), np.concatenate([y_tr, y_val])
    z2 = np.empty(len(rows_y))
    for held in np.array_split(np.random.default_rng(0).permutation(len(rows_y)), CROSS_FIT_FOLDS):
        kept = np.setdiff1d(np.arange(len(rows_y)), held)
        fold = FMGPRegressor(**{**small, "validation_fraction": 0.0, "recalibration": False})
        mean, std = fold.fit(rows_X[kept], rows_y[kept]).predict(rows_X[held], return_std=True)
        z2[held] = ((rows_y[held] - mean) / std) ** 2
    assert model.variance_scale_ == pytest.approx(recalibration_scale(z2.mean(), (z2 ** 2).mean(), len(z2)),
                                                  rel=1e-9)
    assert FMGPRegressor(**small, recalibration="validation").fit(X, y).recalibrated_by_ == "validation"
    off = FMGPRegressor(**small, recalibration=False).fit(X, y)
    assert off.variance_scale == 1.0 and not hasattr(off, "recalibrated_by_")


@pytest.mark.parametrize("rows", [3, 7])
def test_too_few_rows_to_recalibrate_are_said_and_enough_are_silent(rows):
    X, y = toy(rows)
    with pytest.warns(UserWarning, match="variances were not recalibrated: its validation part has (0 rows|1 row) "):
        model = DBKRegressor(**{**SMALL, "max_iter": 20}).fit(X, y)
    assert getattr(model, "variance_scale_", None) is None  # the marginal likelihood's variances, unscaled
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*variances were not recalibrated")
        assert DBKRegressor(**{**SMALL, "max_iter": 20}).fit(*toy(30)).recalibrated_by_ == "cross_fit"
        DBKRegressor(**{**SMALL, "max_iter": 20, "recalibration": False}).fit(X, y)  # asked for none: no warning

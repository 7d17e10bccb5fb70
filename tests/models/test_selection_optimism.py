"""The variance scale's correction for early stopping's pick on the validation part (``selection_optimism``)."""

import numpy as np
import pytest

from neuralgp import DBKRegressor
from neuralgp.models.base import RECALIBRATION_STANDARD_ERRORS as K, selection_optimism


def brute_force(points):
    """γ by running the procedure once per left-out point: pick the check of lowest recalibrated NLL on the others,
    fit α on them, score the left-out point; over the same at the check picked on all points."""
    points = np.asarray(points, dtype=np.float64)
    n = points.shape[2]

    def crit(r, v):
        return np.log(v).mean(1) + np.log((r ** 2 / v).mean(1))

    best = int(np.argmin(crit(points[:, 0], points[:, 1])))
    with_pick, at_best = [], []
    for i in range(n):
        keep = np.arange(n) != i
        r, v = points[:, 0, keep], points[:, 1, keep]
        for c, out in ((int(np.argmin(crit(r, v))), with_pick), (best, at_best)):
            out.append(points[c, 0, i] ** 2 / points[c, 1, i] / np.mean(r[c] ** 2 / v[c]))
    return np.mean(with_pick) / np.mean(at_best)


def test_equals_the_procedure_run_once_per_left_out_point():
    rng = np.random.default_rng(0)
    points = np.stack([rng.standard_normal((40, 23)), rng.uniform(0.2, 3.0, (40, 23))], axis=1)
    gamma = selection_optimism(points)
    assert gamma == pytest.approx(brute_force(points), rel=1e-12) and gamma != pytest.approx(1.0, abs=0.01)
    assert selection_optimism(list(points)) == pytest.approx(gamma, rel=1e-12)  # a list of checks


def test_no_pick_no_correction():
    rng = np.random.default_rng(1)
    one = np.stack([rng.standard_normal(30), rng.uniform(0.5, 2.0, 30)])
    assert selection_optimism([one]) == pytest.approx(1.0, rel=1e-12)
    worse = np.stack([3 * one[0], one[1]])  # a check no point would pick
    assert selection_optimism([one, worse]) == pytest.approx(1.0, rel=1e-12)


def test_corrects_the_optimism_of_picking_among_many_checks():
    """Checks of one training run share most of their errors (here 90 % of the variance) and differ in their
    predictive variance: the pick on 25 points favours small errors, so α = mean z² there is too small and fresh
    points have mean z²/α well above 1; α·γ brings them back to about 1 (medians over repeats)."""
    rng = np.random.default_rng(2)
    plain, corrected = [], []
    for _ in range(300):
        scale = rng.uniform(0.5, 2.0, 200)  # each check's predictive std; errors N(0, 1) whatever the check
        r = np.sqrt(0.9) * rng.standard_normal(25) + np.sqrt(0.1) * rng.standard_normal((200, 25))
        v = np.repeat((scale ** 2)[:, None], 25, axis=1)
        points = np.stack([r, v], axis=1)
        crit = np.log(v).mean(1) + np.log((r ** 2 / v).mean(1))
        c = int(np.argmin(crit))
        alpha = np.mean(r[c] ** 2 / v[c])
        test_z2 = np.mean(rng.standard_normal(1000) ** 2 / v[c, 0])  # fresh points at the picked check
        plain.append(test_z2 / alpha)
        corrected.append(test_z2 / (alpha * selection_optimism(points)))
    assert np.median(plain) > 1.3  # the pick's optimism
    assert 0.9 < np.median(corrected) < 1.1


def test_fit_scales_variances_by_the_corrected_alpha():
    rng = np.random.default_rng(3)
    X = rng.uniform(-1, 1, (150, 2))
    y = np.sin(3 * X[:, 0]) + 0.1 * rng.standard_normal(150)
    params = dict(rank=16, hidden=32, max_iter=150, eval_every=10, verbose=False, lr=3e-3, validation_fraction=0.2,
                  recalibration="validation")  # 30 validation rows: cross-fitted by default
    model = DBKRegressor(**params).fit(X, y)
    points = model.train_log_.validation_points
    assert len(points) == len(model.train_log_.history) == 16  # before the first step and every 10 of 150
    _, _, X_val, y_val = model._hold_out_validation(X, y)
    mean, std = model.predict(X_val, return_std=True)
    # α = (mean z² + K standard errors) there, times γ: after it, that sum is 1/γ
    z2 = ((y_val - mean) / std) ** 2
    assert z2.mean() + K * z2.std(ddof=1) / np.sqrt(len(z2)) == pytest.approx(1 / selection_optimism(points), rel=1e-6)
    assert model.selection_optimism_ == selection_optimism(points)  # kept as a fitted attribute (bench records)
    kept = [h[0] for h in model.train_log_.history].index(model.train_log_.best_step)
    assert selection_optimism(points, kept) == selection_optimism(points)  # the loop's pick is the criterion's


def test_no_finite_correction_leaves_alpha_as_it_is():
    """A validation part predicted exactly but for one point: the left-out sums are 0, γ is not finite; fit keeps
    the plain α instead of dropping the recalibration."""
    from neuralgp.train.loop import TrainLog
    residuals = np.zeros(12)
    residuals[3] = 0.5
    points = np.stack([residuals, np.ones(12)])
    model = DBKRegressor()
    model.train_log_ = TrainLog(history=[(0, np.nan, 0.0)], validation_points=[points], best_step=0)
    assert model._selection_optimism() == 1.0

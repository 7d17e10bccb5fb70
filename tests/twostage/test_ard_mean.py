"""Kernel ridge's ARD candidates (``KernelRidgeCV(ard=True)``, the two-stage ``mean="krr-ard"``): vector
lengthscales are scikit-learn's anisotropic kernels, the marginal-likelihood λ makes kernel ridge the GP's posterior
mean, and the search uses them where inputs differ in relevance."""

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF, Matern

import neuralgp as ng
from neuralgp.twostage import KernelRidgeCV, gram, ridge
from neuralgp.twostage.ridge import ard_hyperparameters
from neuralgp.twostage.variance import fit_variance_gp, predictive_variance

rng = np.random.default_rng(0)
X = rng.uniform(-2, 2, (160, 4))  # only the first input matters
y = np.sin(2 * X[:, 0]) + 0.05 * rng.standard_normal(160)
Xt = rng.uniform(-2, 2, (200, 4))


@pytest.mark.parametrize("name,reference", [("rbf", RBF), ("matern32", lambda ls: Matern(ls, nu=1.5))])
def test_a_lengthscale_per_input_is_scikit_learns_anisotropic_kernel(name, reference):
    scales = (0.5, 1.0, 2.0, 4.0)
    assert np.allclose(gram(name, scales, X[:30], X[30:70]), reference(np.array(scales))(X[:30], X[30:70]),
                       atol=1e-8)


def test_the_marginal_likelihood_lambda_makes_kernel_ridge_the_gp_posterior_mean():
    scales, alpha = ard_hyperparameters(X[:80], y[:80], "rbf")
    gp, _ = fit_variance_gp(X[:80], y[:80], "rbf", warm_start=None, subsample_steps=150, ard=True, lengthscale=2.0)
    assert np.allclose(gp.covar_module.base_kernel.lengthscale.detach().numpy().ravel(), scales)
    ridge = KernelRidgeCV()
    ridge.kernel_, ridge.length_scale_, ridge.alpha_ = "rbf", tuple(scales), alpha
    ridge.fit_chosen(X[:80], y[:80])
    assert np.allclose(ridge.predict(Xt), predictive_variance(gp, Xt)[0], atol=1e-8)
    assert scales[1:].min() > 5 * scales[0]  # the irrelevant inputs get long lengthscales


def test_the_search_takes_the_ard_candidate_where_inputs_differ_in_relevance():
    plain = KernelRidgeCV(kernels=("rbf",)).fit(X, y)
    ard = KernelRidgeCV(kernels=("rbf",), ard=True).fit(X, y)
    assert np.ndim(plain.length_scale_) == 0 and len(ard.length_scale_) == 4
    assert min(ard.cv_mse_.values()) < min(v for (_, ls, _), v in ard.cv_mse_.items() if np.ndim(ls) == 0)
    truth = np.sin(2 * Xt[:, 0])
    rmse = lambda m: np.sqrt(np.mean((m.predict(Xt) - truth) ** 2))  # noqa: E731
    assert rmse(ard) < 0.5 * rmse(plain)


def test_two_stage_with_the_default_ard_mean_fits_and_round_trips(tmp_path):
    # the wiring, round trip and tiny-data path, not the ARD GP's convergence (the marginal-likelihood λ test checks
    # that at 150 steps): 40 ARD steps keep the irrelevant inputs' lengthscales 6x the relevant one's and the
    # fits 3-4x faster
    model = ng.TwoStageGPRegressor(kernel="rbf", warm_start=None, ard_steps=40, verbose=False).fit(X[:80], y[:80])
    assert model.mean_used_ == "krr-ard"  # the default mean where the exact pipeline fits
    assert len(model.mean_model_.length_scale_) == 4
    mean, std = model.predict(Xt, return_std=True)
    assert np.sqrt(np.mean((mean - np.sin(2 * Xt[:, 0])) ** 2)) < 0.1 and np.all(std > 0)
    loaded = ng.load(model.save(tmp_path / "ard.pt"))
    for a, b in zip(loaded.predict(Xt, return_std=True), (mean, std)):
        np.testing.assert_allclose(a, b, rtol=1e-10)
    for n in (3, 6):  # a handful of rows: folds of one or two rows still give every GP something to fit
        model = ng.TwoStageGPRegressor(ard_steps=40, verbose=False).fit(X[:n], y[:n])
        assert np.all(np.isfinite(model.predict(Xt[:5])))
    with pytest.raises(ValueError, match="krr-ard"):
        ng.TwoStageGPRegressor(mean="ard", verbose=False).fit(X, y)


def test_the_ard_candidates_are_scored_by_gps_that_never_saw_the_rows_they_are_scored_on(monkeypatch):
    from sklearn.model_selection import KFold

    seen = []

    def spy(Xs, ys, *args):
        seen.append({tuple(row) for row in Xs})
        return ard_hyperparameters(Xs, ys, *args)
    monkeypatch.setattr(ridge, "ard_hyperparameters", spy)
    KernelRidgeCV(kernels=("rbf",), ard=True).fit(X[:60], y[:60])
    folds = list(KFold(5, shuffle=True, random_state=0).split(np.arange(60)))
    assert len(seen) == 1 + len(folds) and seen[0] == {tuple(row) for row in X[:60]}  # all rows: the final candidate
    for rows, (train, test) in zip(seen[1:], folds):
        assert rows == {tuple(row) for row in X[train]} and not rows & {tuple(row) for row in X[test]}

"""Two-stage GPR components: farthest-point sampling, kernel ridge with cross-validation, KRRNN."""

import tracemalloc

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF, Matern
from sklearn.kernel_ridge import KernelRidge
from sklearn.model_selection import GridSearchCV, KFold
from sklearn.neighbors import NearestNeighbors

import neuralgp as ng
from neuralgp.twostage import KernelRidgeCV, KRRNNRegressor, NoiseShape, farthest_point_sampling, gram
from neuralgp.twostage.noise import STRENGTHS
from neuralgp.twostage.ridge import cv_mse, median_distance, refit_kernel_ridge

rng = np.random.default_rng(0)
X = rng.standard_normal((150, 3))
y = np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.standard_normal(150)


def test_fps_picks_the_farthest_points_of_a_hand_made_set():
    line = np.array([[0.0], [1.0], [2.0], [10.0]])  # centroid 3.25: nearest is 2; then 10; then 0 (2 from 2)
    assert farthest_point_sampling(line, 4).tolist() == [2, 3, 0, 1]
    picks = farthest_point_sampling(X, 30, start="random", seed=3)
    assert len(set(picks.tolist())) == 30
    for i in range(1, 30):  # each new point maximises the distance to those before it (brute force)
        d = np.min(((X[:, None] - X[picks[:i]][None]) ** 2).sum(-1), axis=1)
        assert d[picks[i]] == pytest.approx(d.max())
    with pytest.raises(ValueError, match="k must be"):
        farthest_point_sampling(X, 151)
    with pytest.raises(ValueError, match="start"):
        farthest_point_sampling(X, 3, start="middle")


def test_fps_memory_is_linear_in_n():
    big = np.random.default_rng(1).standard_normal((200_000, 2))
    tracemalloc.start()
    farthest_point_sampling(big, 20)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 12 * big.nbytes  # a few length-n vectors, never n × k or n × n


@pytest.mark.parametrize("name,reference", [("rbf", RBF(0.7)), ("matern12", Matern(0.7, nu=0.5)),
                                            ("matern32", Matern(0.7, nu=1.5))])
def test_gram_is_the_registry_kernel(name, reference):
    assert np.allclose(gram(name, 0.7, X[:40], X[40:90]), reference(X[:40], X[40:90]), atol=1e-8)


def test_kernel_ridge_equals_scikit_learn_kernel_ridge():
    alpha = 1e-2
    ours = KernelRidgeCV(kernels=("rbf",), alphas=(alpha,), length_scales=(1.0,)).fit(X, y)
    ls = ours.length_scale_  # 1 × the median distance
    ref = KernelRidge(alpha=alpha, kernel="rbf", gamma=1 / (2 * ls ** 2)).fit(X, y)
    assert np.allclose(ours.predict(X[:20]), ref.predict(X[:20]), atol=1e-7)


def test_leave_one_out_residuals_equal_refits_without_the_row():
    model = KernelRidgeCV(kernels=("matern32",), alphas=(1e-2,), length_scales=(1.0,)).fit(X[:60], y[:60])
    ls = model.length_scale_
    refits = [y[i] - KernelRidge(alpha=1e-2, kernel="precomputed").fit(
        gram("matern32", ls, np.delete(X[:60], i, 0)), np.delete(y[:60], i)).predict(
        gram("matern32", ls, X[i:i + 1], np.delete(X[:60], i, 0)))[0] for i in range(60)]
    assert np.allclose(model.loo_residuals(), refits, atol=1e-8)
    kept = KernelRidgeCV(kernels=("matern32",), alphas=(1e-2,), length_scales=(1.0,), loo=True).fit(X[:60], y[:60])
    assert np.allclose(kept.loo_residuals_, refits, atol=1e-8)  # from the final fit's own Cholesky factor
    assert np.allclose(refit_kernel_ridge(model, X[:60], y[:60], loo=True).loo_residuals_, refits, atol=1e-8)


def test_krrnn_leave_one_out_drops_the_row_itself_not_a_copy():
    """With copies of an input at distance 0, the row left out is the row (by index), its copies stay."""
    Xc, yc = np.vstack([X[:40], X[:5]]), np.concatenate([y[:40], y[:5] + 0.3])
    krrnn = KRRNNRegressor(n_neighbors=10).fit(Xc, yc)
    for i, copy in ((0, 40), (3, 43), (41, 1)):
        others = np.delete(np.arange(len(yc)), i)
        near = others[NearestNeighbors(n_neighbors=10).fit(Xc[others]).kneighbors(Xc[[i]], return_distance=False)[0]]
        assert i not in near and copy in near
        direct = KernelRidge(alpha=1e-3, kernel="precomputed").fit(gram("rbf", 1.0, Xc[near]), yc[near])
        assert np.isclose(krrnn.predict(Xc, exclude_self=True)[i],
                          direct.predict(gram("rbf", 1.0, Xc[[i]], Xc[near]))[0], atol=1e-10)


def test_kernel_ridge_cross_validation_records_every_candidate():
    model = KernelRidgeCV(alphas=(1e-3, 1e-1), length_scales=(0.5, 1.0), edge_steps=0, cv=3).fit(X, y)
    assert len(model.cv_mse_) == 3 * 2 * 2
    assert model.cv_mse_[(model.kernel_, model.length_scale_, model.alpha_)] == min(model.cv_mse_.values())
    assert np.sqrt(np.mean((model.predict(X) - y) ** 2)) < 0.5 * y.std()


def test_cross_validated_mse_equals_grid_search_over_kernel_ridge():
    K, alphas = gram("matern32", 1.3, X[:90]), (1e-5, 1e-2, 1.0, 100.0)
    folds = KFold(4, shuffle=True, random_state=0)
    grid = GridSearchCV(KernelRidge(kernel="precomputed"), {"alpha": list(alphas)}, cv=folds,
                        scoring="neg_mean_squared_error").fit(K, y[:90])
    ours = cv_mse(K, y[:90], list(folds.split(K)), alphas)
    assert np.allclose(ours, -grid.cv_results_["mean_test_score"], rtol=1e-6)


@pytest.mark.parametrize("wiggles,grid,end", [(0.0, (0.125, 0.25), "up"), (3.0, (2.0, 4.0), "down")])
def test_kernel_ridge_grid_grows_past_the_end_that_wins(wiggles, grid, end):
    """A line wants a lengthscale above a grid of short ones, a sine of 1.5 periods one below a grid of long ones:
    the grid grows by factors of 2 past the winning end until an interior factor wins or the steps are spent."""
    x = np.linspace(-1, 1, 80)[:, None]
    target = x[:, 0] if wiggles == 0 else np.sin(wiggles * np.pi / 2 * x[:, 0])
    model = KernelRidgeCV(kernels=("rbf",), alphas=(1e-4,), length_scales=grid, edge_steps=4, cv=4).fit(x, target)
    factors = np.array(sorted({k[1] for k in model.cv_mse_})) / median_distance(x)
    assert len(factors) > 2 and np.allclose(factors[1:] / factors[:-1], 2.0)
    assert np.isclose(factors[0], grid[0]) if end == "up" else np.isclose(factors[-1], grid[-1])
    assert model.cv_mse_[(model.kernel_, model.length_scale_, model.alpha_)] == min(model.cv_mse_.values())
    ends = factors[[0, -1]] * median_distance(x)
    assert not np.isclose(ends, model.length_scale_).any() or len(factors) == len(grid) + 4


def test_krrnn_is_kernel_ridge_on_each_neighbourhood():
    model = KRRNNRegressor(kernel="matern32", length_scale=1.2, alpha=1e-2, n_neighbors=25, batch_size=7).fit(X, y)
    queries = rng.standard_normal((10, 3))
    neighbours = NearestNeighbors(n_neighbors=25).fit(X).kneighbors(queries, return_distance=False)
    direct = [KernelRidge(alpha=1e-2, kernel="precomputed").fit(gram("matern32", 1.2, X[i]), y[i])
              .predict(gram("matern32", 1.2, q[None], X[i]))[0] for q, i in zip(queries, neighbours)]
    assert np.allclose(model.predict(queries), direct, atol=1e-10)
    loo = model.predict(X[:5], exclude_self=True)  # a training point left out of its own neighbourhood
    neighbours = NearestNeighbors(n_neighbors=26).fit(X).kneighbors(X[:5], return_distance=False)[:, 1:]
    direct = [KernelRidge(alpha=1e-2, kernel="precomputed").fit(gram("matern32", 1.2, X[i]), y[i])
              .predict(gram("matern32", 1.2, X[[j]], X[i]))[0] for j, i in enumerate(neighbours)]
    assert np.allclose(loo, direct, atol=1e-10)
    with pytest.raises(ValueError, match="n_neighbors"):
        KRRNNRegressor(n_neighbors=0).fit(X, y)


def test_kernel_search_scores_the_true_kernel_of_an_rbf_sample_highest_or_near():
    """The spec's check (not a claim of the paper): the true kernel's score is the highest or within 0.02 of it.
    Not asserted for Matérn-1/2 samples: there the search preferred RBF in 3 of 4 seeds (docs/methods/twostage.md)."""
    from neuralgp.twostage import automatic_kernel_search
    gen = np.random.default_rng(0)
    Xs = gen.uniform(0, 5, (600, 1))
    ys = np.linalg.cholesky(RBF(1.0)(Xs) + 1e-8 * np.eye(600)) @ gen.standard_normal(600)
    best, scores = automatic_kernel_search(Xs, ys + 0.1 * gen.standard_normal(600), repeats=6, subsample=300)
    assert set(scores) == {"rbf", "matern32", "matern12"} and all(0 <= s <= 1 for s in scores.values())
    assert scores["rbf"] >= max(scores.values()) - 0.02 and scores["matern12"] < scores["rbf"]


def test_kernel_search_picks_matern12_on_a_nearly_noiseless_matern12_sample():
    """Noise 0.01: Matérn-1/2 won 4 of 4 seeds by ≥ 0.18; at noise 0.1 it lost to RBF in 3 of 4, and at noise 0.01
    RBF samples were also called Matérn-1/2 in 3 of 4 — the score does not identify the kernel in general
    (docs/methods/twostage.md has the whole confusion table)."""
    from neuralgp.twostage import automatic_kernel_search
    gen = np.random.default_rng(0)
    Xs = gen.uniform(0, 5, (600, 1))
    ys = np.linalg.cholesky(Matern(1.0, nu=0.5)(Xs) + 1e-8 * np.eye(600)) @ gen.standard_normal(600)
    best, scores = automatic_kernel_search(Xs, ys + 0.01 * gen.standard_normal(600), repeats=6, subsample=300)
    assert best == "matern12" and scores["matern12"] > max(scores["rbf"], scores["matern32"]) + 0.1


def test_delta_test_errors_and_decision():
    from neuralgp.twostage import delta_ratio_test
    with pytest.raises(ValueError, match="unknown kernel"):
        delta_ratio_test(X, y, "cosine")
    with pytest.raises(ValueError, match="model"):
        delta_ratio_test(X, y, "rbf", model="svm")
    with pytest.raises(ValueError, match="at least 3.*kernel='rbf'"):
        delta_ratio_test(X[:2], y[:2], "rbf")
    model = ng.TwoStageGPRegressor(verbose=False)
    with pytest.raises(ValueError, match="at least 3.*kernel='rbf'"):  # kernel="auto" on 2 rows: before any work
        model.fit(X[:2], y[:2])
    assert not hasattr(model, "mean_model_")
    result = delta_ratio_test(X, y, "rbf", model="krr", repeats=2, subsample=100)
    assert len(result.fractions) == 2 and result.rejected == (result.score < 0.95)


def test_refit_keeps_the_hyper_parameters_and_fits_the_new_rows():
    model = KernelRidgeCV(alphas=(1e-3, 1e-1), length_scales=(0.5, 1.0), edge_steps=0, cv=3).fit(X, y)
    refit = refit_kernel_ridge(model, X[:70], y[:70])
    ref = KernelRidge(alpha=model.alpha_, kernel="precomputed").fit(gram(model.kernel_, model.length_scale_, X[:70]),
                                                                    y[:70])
    assert np.allclose(refit.predict(X[70:90]), ref.predict(gram(model.kernel_, model.length_scale_, X[70:90], X[:70])))
    nn = refit_kernel_ridge(KRRNNRegressor(n_neighbors=7, alpha=0.05).fit(X, y), X[:70], y[:70])
    assert nn.get_params()["alpha"] == 0.05 and len(nn.y_fit_) == 70


@pytest.mark.parametrize("truth", [1.0, 0.0])
def test_noise_strength_is_chosen_by_the_held_out_errors(truth):
    """Errors whose variance is exp(g) choose the full shape; errors that ignore g choose a flat one (ρ = 0)."""
    g_rng = np.random.default_rng(4)
    g = g_rng.normal(0, 1.2, 4000)
    err = g_rng.standard_normal(4000) * np.exp(truth * g / 2)
    halves = [np.arange(2000), np.arange(2000, 4000)]
    norms = [(held, g[other]) for held, other in zip(halves, halves[::-1])]
    shape = NoiseShape()
    shape._g_train = g
    s = shape.choose_strength(err, np.zeros(4000), np.ones(4000), g, norms)
    assert shape.strength_ == truth and set(shape.strength_scores_) == set(STRENGTHS)
    assert np.allclose(s[:2000], np.exp(truth * g[:2000]) / np.mean(np.exp(truth * g[2000:])))


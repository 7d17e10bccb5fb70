"""DAK: the closed-form and Monte Carlo bounds, the mean-field optimum, DAK-exact against the dense GP, the three
inference kinds end to end, fine-tuning, persistence and bad input (issue 15 §4)."""

import numpy as np
import pytest
import torch

import neuralgp as ng
import neuralgp.models.dak as dak_module
from neuralgp.errors import InputError, NotFittedError, ParameterError
from neuralgp.features import MLP, AdditiveGridFeatures, InducedGrid
from neuralgp.features.additive import _GridMoments
from neuralgp.posterior import GaussianLikelihood, MeanFieldPosterior, elbo, mc_elbo
from neuralgp.posterior.variational import FullRankPosterior
from neuralgp.registry import build

F64 = torch.float64
SMALL = dict(n_projections=4, grid_level=3, hidden=(16,), embedding_dim=8, max_epochs=30, max_iter=30,
             batch_size=64, lr=1e-2, verbose=False)


def _features(n=50, P=3, level=3, seed=0):
    torch.manual_seed(seed)
    fmap = AdditiveGridFeatures(MLP(2, 6, hidden=8, depth=1), 6, P, InducedGrid(level)).double()
    X = torch.randn(n, 2, dtype=F64)
    with torch.no_grad():
        return fmap.sparse(X), X, fmap


def _random_q(r, seed=1):
    torch.manual_seed(seed)
    q = MeanFieldPosterior(r).double()
    with torch.no_grad():
        q.mean.normal_(0, 0.5)
        q.raw_std.normal_(-1, 0.3)
    return q


def test_sparse_rows_equal_dense_features_in_every_posterior_operation():
    phi, _, fmap = _features()
    dense = phi.dense()
    assert dense.shape == (50, fmap.n_columns) and (dense != 0).sum(-1).max() <= 3 * 3 + 1
    for q in (_random_q(fmap.n_columns), FullRankPosterior(fmap.n_columns).double()):
        for a, b in zip(q.predict_f(phi), q.predict_f(dense)):
            assert torch.allclose(a, b, atol=1e-12)
        torch.manual_seed(3)
        sparse_draws = q.sample_f(phi, 4)
        torch.manual_seed(3)
        assert torch.allclose(sparse_draws, q.sample_f(dense, 4), atol=1e-12)


@pytest.mark.parametrize("level, outputs", [(3, None), (4, 3), (14, None)])  # 14: no tables, the rows
def test_fused_grid_moments_equal_the_explicit_rows_with_their_gradients(level, outputs):
    torch.manual_seed(0)
    fmap = AdditiveGridFeatures(MLP(2, 6, hidden=8, depth=1), 6, 3, InducedGrid(level, lengthscale=0.3)).double()
    X = torch.randn(20, 2, dtype=F64)
    shape = (fmap.n_columns,) if outputs is None else (outputs, fmap.n_columns)
    mean = torch.randn(shape, dtype=F64, requires_grad=True)
    var = torch.rand(shape, dtype=F64, requires_grad=True)
    weights = torch.randn(2, *shape[:-1], 20, dtype=F64)
    params = [mean, var, *fmap.parameters()]

    def loss(fused):
        rows = fmap.sparse(X)
        moments = rows.moments(mean, var) if fused else rows.rows.moments(mean, var)
        return sum((w * m).sum() for w, m in zip(weights, moments))

    assert torch.allclose(loss(True), loss(False), atol=1e-12)
    for a, b in zip(torch.autograd.grad(loss(True), params), torch.autograd.grad(loss(False), params)):
        assert torch.allclose(a, b, atol=1e-10)
    if fmap.grid.tables is not None:  # the fused node against finite differences
        h = fmap.projections(X).detach().requires_grad_()
        scales = fmap.scales().detach().requires_grad_()
        tables = fmap.block_tables(h.device, F64)
        fused = lambda h, s, m, v: _GridMoments.apply(h, s, m, v, fmap.grid, fmap.bias_std, *tables)  # noqa: E731
        assert torch.autograd.gradcheck(fused, (h, scales, mean, var))


def test_closed_form_expected_log_likelihood_equals_the_monte_carlo_mean():
    phi, _, fmap = _features()
    q = _random_q(fmap.n_columns)
    y = torch.randn(50, dtype=F64)
    lik = GaussianLikelihood(torch.tensor(0.3, dtype=F64))
    mean, var = q.predict_f(phi)
    closed = lik.expected_log_prob(y, mean, var)
    torch.manual_seed(0)
    draws = lik.log_prob(y, q.sample_f(phi, 100_000))  # (S, n)
    se = draws.std(0) / np.sqrt(draws.shape[0])
    assert ((draws.mean(0) - closed).abs() < 4 * se + 1e-9).all()
    # and so the two bounds agree: mc_elbo is an unbiased estimate of elbo
    torch.manual_seed(1)
    estimates = torch.stack([mc_elbo(phi, y, q, lik, 2000) for _ in range(5)])
    assert abs(float(estimates.mean() - elbo(phi, y, q, lik))) < 4 * float(estimates.std()) + 1e-6


def test_closed_form_bound_optimum_is_the_exact_posterior_mean_and_mean_field_variance():
    """Fixed features: mean-field VI on a Gaussian target recovers the exact mean, variances 1/diag(Λ)."""
    phi, _, fmap = _features(n=40, P=2, level=2)
    Phi = phi.dense()
    y = torch.sin(torch.arange(40, dtype=F64))
    noise = torch.tensor(0.1, dtype=F64)
    q = MeanFieldPosterior(fmap.n_columns).double()
    opt = torch.optim.LBFGS(q.parameters(), max_iter=500, tolerance_grad=1e-12, tolerance_change=1e-15,
                            line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = -elbo(phi, y, q, GaussianLikelihood(noise))
        loss.backward()
        return loss
    for _ in range(5):
        opt.step(closure)
    lam = torch.eye(fmap.n_columns, dtype=F64) + Phi.T @ Phi / noise
    exact_mean = torch.linalg.solve(lam, Phi.T @ y / noise)
    assert torch.allclose(q.mean.detach(), exact_mean, rtol=1e-4, atol=1e-6)
    assert torch.allclose(q.std().detach() ** 2, 1 / torch.diagonal(lam), rtol=1e-4)
    log_evidence = torch.distributions.MultivariateNormal(
        torch.zeros(40, dtype=F64), Phi @ Phi.T + noise * torch.eye(40, dtype=F64)).log_prob(y)
    assert float(elbo(phi, y, q, GaussianLikelihood(noise))) <= float(log_evidence) + 1e-9


def _data(n=120, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, d))
    return X, np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] ** 2 + 0.1 * rng.standard_normal(n)


def test_exact_predictions_equal_the_dense_gp_with_the_induced_additive_kernel(dense_gp):
    X, y = _data()
    model = ng.DAKRegressor(inference="exact", validation_fraction=0.0, **SMALL).fit(X, y)
    Xs = _data(30, seed=1)[0]
    Phi, Phi_s = model.features(X), model.features(Xs)
    mean, var_f, _ = dense_gp(Phi @ Phi.T, Phi @ Phi_s.T, (Phi_s ** 2).sum(1), y, model.noise_variance_,
                              offset=y.mean())
    dist = model.predict_dist(Xs)
    assert np.allclose(dist["mean"], mean, atol=1e-6 * np.abs(y).max())
    assert np.allclose(dist["var_f"], var_f, rtol=1e-5, atol=1e-9)
    assert np.allclose(dist["var_y"], var_f + model.noise_variance_, rtol=1e-5)


@pytest.mark.parametrize("inference", ["closed_form", "mc", "exact"])
def test_each_inference_learns_and_round_trips(inference, tmp_path):
    X, y = _data(300)
    model = ng.DAKRegressor(inference=inference, **SMALL).fit(X, y)
    Xs, ys = _data(100, seed=2)
    mean, std = model.predict(Xs, return_std=True)
    assert np.sqrt(np.mean((mean - ys) ** 2)) < 0.8 * ys.std()  # learns more than the mean
    assert np.all(std > 0) and np.isfinite(std).all()
    loaded = ng.load(model.save(tmp_path / "dak.pt"))
    m2, s2 = loaded.predict(Xs, return_std=True)
    assert np.allclose(m2, mean) and np.allclose(s2, std)


def test_projections_are_standardised_in_chunks_and_the_regressor_starts_there_when_asked():
    _, X, fmap = _features(n=70, P=3)
    fmap.standardise_projections(X, spread=2.0, chunk_size=16)  # chunks of 16, 16, 16, 16, 6 rows
    with torch.no_grad():
        a = fmap.project(fmap.net(X))
    assert torch.allclose(a.mean(0), torch.zeros(3, dtype=F64), atol=1e-10)
    assert torch.allclose(a.std(0, unbiased=False), torch.full((3,), 2.0, dtype=F64), atol=1e-10)
    starts = {}

    class Probe(ng.DAKRegressor):
        def _prepare(self, Xt, yt):
            super()._prepare(Xt, yt)
            with torch.no_grad():
                starts["a"] = self.module_.net.project(self.module_.net.net(Xt))

    X, y = _data(200)
    Probe(projection_spread=0.5, **{**SMALL, "max_epochs": 1}).fit(X, y)
    assert torch.allclose(starts["a"].std(0, unbiased=False), torch.full((4,), 0.5, dtype=starts["a"].dtype),
                          atol=1e-4)
    Probe(**{**SMALL, "max_epochs": 1}).fit(X, y)  # the default: PyTorch's start, unscaled
    assert starts["a"].std(0).max() < 0.45


def test_finetune_freezes_the_pretrained_network():
    snapshots = {}

    class Probe(ng.DAKRegressor):
        def _prepare(self, Xt, yt):
            super()._prepare(Xt, yt)
            snapshots["after"] = {k: v.clone() for k, v in self.module_.net.net.state_dict().items()}

    X, y = _data(200)
    model = Probe(finetune=True, **SMALL).fit(X, y)
    final = model.module_.net.net.state_dict()
    assert all(torch.equal(final[k], v) for k, v in snapshots["after"].items())
    assert not all(p.requires_grad for p in model.module_.net.project.parameters())


def test_registry_names_and_presets():
    assert build("dak").inference == "auto" and build("dak-cf").inference == "closed_form"
    assert build("dak-mc").inference == "mc" and build("dak-exact").inference == "exact"


def test_auto_inference_is_exact_up_to_the_row_limit_and_its_refits_and_saved_copy_keep_the_choice(monkeypatch,
                                                                                                    tmp_path):
    monkeypatch.setattr(dak_module, "EXACT_MAX_ROWS", 100)
    X, y = _data(110)
    params = dict(validation_fraction=0.0, bagging=0, **SMALL)
    small = ng.DAKRegressor(**params).fit(X[:100], y[:100])
    large = ng.DAKRegressor(**params).fit(X, y)
    assert (small.inference_, large.inference_) == ("exact", "closed_form")
    assert small.conditions_on_rows() and not large.conditions_on_rows()
    assert hasattr(small.posterior_, "chol") and isinstance(large.posterior_, MeanFieldPosterior)
    # a bag member or cross-fitting fold on fewer rows keeps the fit's inference (and its step budget's kind)
    assert large._fixed_budget_clone(110, 55).get_params()["inference"] == "closed_form"
    assert "max_epochs" in large._refit_budget(110, 55)
    exact = ng.DAKRegressor(**{**params, "inference": "exact"}).fit(X[:100], y[:100])
    Xs = _data(20, seed=3)[0]
    assert np.array_equal(exact.predict(Xs), small.predict(Xs))  # auto on 100 rows is exactly DAK-exact
    for model in (small, large):
        loaded = ng.load(model.save(tmp_path / f"{model.inference_}.pt"))
        assert loaded.inference_ == model.inference_ and loaded.get_params()["inference"] == "auto"
        assert np.array_equal(loaded.predict(Xs), model.predict(Xs))


def test_auto_inference_above_the_exact_limit_fits_both_and_keeps_the_lower_validation_nll(monkeypatch, tmp_path):
    monkeypatch.setattr(dak_module, "EXACT_MAX_ROWS", 50)
    X, y = _data(120)
    params = dict(validation_fraction=0.25, bagging=0, **SMALL)  # 90 training rows: above the limit
    model = ng.DAKRegressor(**params, max_time=600.0, checkpoint=tmp_path / "fit.ckpt").fit(X, y)
    assert set(model.inference_scores_) == {"closed_form", "exact"} and model.max_time == 600.0
    assert not any(tmp_path.iterdir())  # each candidate's checkpoint (fit.ckpt.<inference>) removed when done
    Xs = _data(20, seed=3)[0]
    for kind in ("closed_form", "exact"):  # each candidate is the fit of that inference alone
        alone = ng.DAKRegressor(**{**params, "inference": kind}).fit(X, y)
        assert model.inference_scores_[kind] == alone.train_log_.best_val_nll
        if kind == model.inference_:
            assert np.array_equal(model.predict(Xs), alone.predict(Xs))
            assert model.variance_scale == alone.variance_scale
    assert model.inference_ == min(model.inference_scores_, key=model.inference_scores_.get)
    loaded = ng.load(model.save(tmp_path / "model.pt"))
    assert (loaded.inference_, loaded.inference_scores_) == (model.inference_, model.inference_scores_)
    assert np.array_equal(loaded.predict(Xs), model.predict(Xs))
    monkeypatch.setattr(dak_module, "SELECT_MAX_ROWS", 89)  # above the selection limit: the closed form alone
    model.fit(X, y)
    assert model.inference_ == "closed_form" and not hasattr(model, "inference_scores_")


def test_auto_grid_level_is_the_finer_grid_for_the_closed_form_only_and_its_saved_copy_keeps_it(monkeypatch,
                                                                                                 tmp_path):
    monkeypatch.setattr(dak_module, "EXACT_MAX_ROWS", 50)
    X, y = _data(120)
    params = {**SMALL, "grid_level": "auto", "validation_fraction": 0.25, "bagging": 0}
    P, Xs = SMALL["n_projections"], _data(20, seed=3)[0]
    for kind, level in (("closed_form", dak_module.CLOSED_FORM_LEVEL), ("mc", dak_module.PAPER_LEVEL),
                        ("exact", dak_module.PAPER_LEVEL)):
        model = ng.DAKRegressor(**{**params, "inference": kind}).fit(X, y)
        assert model.module_.net.n_columns == P * (2 ** level - 1) + 1
        fixed = ng.DAKRegressor(**{**params, "inference": kind, "grid_level": level}).fit(X, y)
        assert np.array_equal(model.predict(Xs), fixed.predict(Xs))  # "auto" is exactly that level
    selected = ng.DAKRegressor(**params).fit(X, y)  # "auto" inference: each candidate on its own grid
    alone = ng.DAKRegressor(**{**params, "inference": "closed_form"}).fit(X, y)
    assert selected.inference_scores_["closed_form"] == alone.train_log_.best_val_nll
    loaded = ng.load(selected.save(tmp_path / "model.pt"))
    assert loaded.get_params()["grid_level"] == "auto" and loaded.grid().level == selected.grid().level
    assert np.array_equal(loaded.predict(Xs), selected.predict(Xs))


@pytest.mark.parametrize("params,match", [({"n_projections": 0}, "n_projections"), ({"grid_level": 0}, "grid_level"),
                                          ({"grid_level": 21}, "grid_level"), ({"grid_level": "fine"}, "grid_level"),
                                          ({"inference": "cf"}, "inference"),
                                          ({"hidden": (0,)}, "hidden"), ({"kernel": "rbf"}, "kernel"),
                                          ({"projection_spread": 0}, "projection_spread")])
def test_bad_parameters_are_clear_errors_before_any_work(params, match):
    X, y = _data(30)
    with pytest.raises(ParameterError, match=match):
        ng.DAKRegressor(**{**SMALL, **params}).fit(X, y)


def test_bad_input_and_unfitted_save_write_nothing(tmp_path):
    X, y = _data(30)
    X[3, 1] = np.nan
    model = ng.DAKRegressor(**SMALL)
    with pytest.raises(InputError, match="NaN"):
        model.fit(X, y)
    with pytest.raises(NotFittedError):
        model.save(tmp_path / "m.pt")
    assert list(tmp_path.iterdir()) == []


def test_classifier_probabilities_sum_to_one_learn_and_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 4))
    y = np.where(X[:, 0] + X[:, 1] > 0, "a", np.where(X[:, 2] > 0, "b", "c"))
    model = ng.DAKClassifier(n_projections=4, hidden=(16,), embedding_dim=8, max_epochs=60, lr=1e-2,
                             verbose=False).fit(X[:200], y[:200], X[200:250], y[200:250])
    proba = model.predict_proba(X[250:])
    assert proba.shape == (50, 3) and np.allclose(proba.sum(1), 1) and (proba >= 0).all()
    assert (model.predict(X[250:]) == y[250:]).mean() > 0.7
    assert model.temperature_ != 1.0
    loaded = ng.load(model.save(tmp_path / "dakc.pt"))
    assert np.allclose(loaded.predict_proba(X[250:]), proba)
    with pytest.raises(InputError, match="not in y"):
        model.calibrate_temperature(X[:3], np.array(["a", "b", "z"]))


def test_cnn_backbone_on_square_images_and_a_clear_error_otherwise():
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 16, (120, 64))
    y = (X[:, :32].mean(1) > X[:, 32:].mean(1)).astype(int)
    for model in (ng.DAKClassifier(backbone="cnn", n_projections=4, embedding_dim=8, max_epochs=3, verbose=False),
                  ng.NetworkClassifier(backbone="cnn", max_epochs=3, verbose=False)):
        assert model.fit(X, y).predict_proba(X[:5]).shape == (5, 2)
    with pytest.raises(ValueError, match="not a square"):
        ng.DAKRegressor(backbone="cnn", **SMALL).fit(*_data(30))


@pytest.mark.parametrize("backbone", ["mlp", "cnn"])
def test_the_network_row_has_daks_extractor_with_a_linear_head(tmp_path, backbone):
    """The DAK paper's "NN": DAK's own feature network (same layers, same parameter count) and a linear head to the
    C logits; it saves and loads."""
    from neuralgp.bench.evaluate import count_parameters
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 16, (120, 64))
    y = (X[:, :32].mean(1) > X[:, 32:].mean(1)).astype(int) + (X[:, 0] > 8)
    kw = dict(backbone=backbone, hidden=(64, 32), embedding_dim=64, max_epochs=2, verbose=False)
    dak = ng.DAKClassifier(**kw).fit(X, y)
    net = ng.NetworkClassifier(norm=None, **kw).fit(X, y)
    extractor, head = net.net_
    assert sum(p.numel() for p in extractor.parameters()) == sum(p.numel() for p in dak.module_.net.net.parameters())
    assert (head.in_features, head.out_features) == (64, 3)
    assert count_parameters(net) == sum(p.numel() for p in net.net_.parameters())
    P, M = dak.n_projections, 2 ** dak.grid_level - 1
    assert count_parameters(dak) > sum(p.numel() for p in dak.module_.net.net.parameters()) + 2 * 3 * P * M
    assert np.allclose(ng.load(net.save(tmp_path / "net.pt")).predict_proba(X[:5]), net.predict_proba(X[:5]))
    svdkl = ng.SVDKLClassifier(num_inducing=8, **kw).fit(X, y)
    assert sum(p.numel() for p in svdkl.net_.parameters()) == sum(p.numel() for p in dak.module_.net.net.parameters())
    Z = svdkl.gp_.variational_strategy.base_variational_strategy.inducing_points
    assert Z.shape == (3, 8, 64)  # one SVGP per class on the 64 network outputs
    proba = svdkl.predict_proba(X[:5])
    assert np.allclose(proba.sum(1), 1) and np.allclose(ng.load(svdkl.save(tmp_path / "s.pt")).predict_proba(X[:5]),
                                                        proba)

"""DBKRegressor: equality with the dense GP it claims to be, persistence, scikit-learn conventions."""

import numpy as np
import pytest
import torch
from sklearn.base import clone

import neuralgp
from neuralgp import DBKRegressor
from neuralgp.models.base import RECALIBRATION_STANDARD_ERRORS as K, selection_optimism
from neuralgp.train import train

SMALL = dict(rank=16, hidden=32, max_iter=150, verbose=False, lr=3e-3, validation_fraction=0.0)  # fit on all of X


def toy(n=120, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 3, size=(n, d))
    y = np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=n) + 4.0
    return X, y


def dbk_as_dense_gp(dense_gp, model, X, y, X_star, corrected):
    """k = features·features + diag(c), noise σ², prior mean = the target shift, as a dense GP."""
    phi, phi_s = model.features(X), model.features(X_star)
    sq, sq_s = (phi ** 2).sum(1), (phi_s ** 2).sum(1)
    M = sq.max()
    c, c_s = (M - sq, np.maximum(M - sq_s, 0)) if corrected else (0 * sq, 0 * sq_s)
    mean, var_f, _ = dense_gp(phi @ phi.T + np.diag(c), phi @ phi_s.T, sq_s + c_s, y, model.noise_variance_,
                              offset=model.y_scaler_.shift_[0])
    return mean, np.sqrt(var_f + model.noise_variance_)


@pytest.mark.parametrize("params,corrected", [
    ({}, True),                                   # default: constant-norm features + correction
    ({"normalize_features": False}, True),        # the paper's trace regulariser + diagonal correction
    ({"variance_correction": False}, False),      # DBK-c
    ({"rank": 1}, True),                          # DBK-r
])
@pytest.mark.parametrize("normalize_y", [False, True])
def test_predictions_equal_dense_gp_from_features(params, corrected, normalize_y, dense_gp):
    X, y = toy()
    X_star = np.random.default_rng(5).uniform(-3, 4, size=(30, 2))  # includes points outside the data
    model = DBKRegressor(normalize_y=normalize_y, **{**SMALL, **params}).fit(X, y)
    mean, std = model.predict(X_star, return_std=True)
    d_mean, d_std = dbk_as_dense_gp(dense_gp, model, X, y, X_star, corrected)
    np.testing.assert_allclose(mean, d_mean, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(std, d_std, rtol=1e-6, atol=1e-6)
    if corrected:
        assert model.max_prior_variance_ == pytest.approx((model.features(X) ** 2).sum(1).max(), rel=1e-9)


def test_constant_norm_features_have_uniform_prior_variance():
    X, y = toy()
    model = DBKRegressor(**SMALL).fit(X, y)
    sq = (model.features(np.random.default_rng(1).uniform(-5, 5, (50, 2))) ** 2).sum(1)
    np.testing.assert_allclose(sq, sq[0], rtol=1e-5)
    assert model.uses_normalized_features() and not model.trains_trace_regulariser()


def test_constant_norm_backward_matches_autograd_of_the_formula():
    from neuralgp.features.networks import ScaledUnitRows
    torch.manual_seed(0)
    g = torch.randn(9, 5, dtype=torch.float64, requires_grad=True)
    scale = torch.tensor(1.7, dtype=torch.float64, requires_grad=True)
    fused = ScaledUnitRows.apply
    assert torch.autograd.gradcheck(lambda g, s: fused(g, s, 1e-12), (g, scale))
    w = torch.randn(9, 5, dtype=torch.float64)
    reference = torch.autograd.grad((scale * g / g.norm(dim=-1, keepdim=True) * w).sum(), (g, scale))
    ours = torch.autograd.grad((fused(g, scale, 1e-12) * w).sum(), (g, scale))
    for a, b in zip(reference, ours):
        assert torch.allclose(a, b, atol=1e-14)


@pytest.mark.parametrize("inference", ["exact", "svi"])
def test_save_load_round_trip_without_training_data(tmp_path, inference):
    X, y = toy()
    model = DBKRegressor(inference=inference, max_epochs=15, batch_size=32, **SMALL).fit(X, y, X[:20], y[:20])
    path = model.save(tmp_path / "m.pt")
    loaded = neuralgp.load(path)
    X_star = np.random.default_rng(2).uniform(-2, 3, (25, 2))
    for a, b in zip(model.predict(X_star, return_std=True), loaded.predict(X_star, return_std=True)):
        np.testing.assert_array_equal(a, b)
    assert loaded.get_params() == model.get_params()
    assert loaded.noise_variance_ == model.noise_variance_
    payload = torch.load(path, weights_only=True)
    sizes = [v.numel() for v in payload["fitted"]["module"].values()]
    assert len(y) not in {s for s in sizes if s != 16 * 16}  # nothing with one entry per training row
    assert not any(torch.is_tensor(v) and v.shape[:1] == (len(y),) for v in payload["fitted"].values())


def test_svi_learns_and_reports_variance():
    X, y = toy(n=400)
    model = DBKRegressor(inference="svi", rank=16, hidden=32, max_epochs=60, batch_size=64, lr=5e-3,
                         verbose=False).fit(X, y)
    Xt, yt = toy(n=200, seed=1)
    mean, std = model.predict(Xt, return_std=True)
    assert np.sqrt(np.mean((mean - yt) ** 2)) < 0.5 * yt.std()
    dist = model.predict_dist(Xt)
    np.testing.assert_allclose(dist["var_y"], std ** 2)
    assert np.all(dist["var_y"] > dist["var_f"]) and np.all(dist["var_f"] >= 0)


def test_meanfield_family_and_sklearn_conventions():
    model = DBKRegressor(inference="svi", variational_family="meanfield", max_epochs=5, **SMALL)
    cloned = clone(model)
    assert cloned.get_params() == model.get_params()
    cloned.set_params(rank=8)
    X, y = toy()
    cloned.fit(X, y)
    assert cloned.module_.q.mean.shape == (8,)
    assert -1 < cloned.score(X, y) <= 1
    assert not hasattr(model, "module_")


def test_exact_fit_is_reproducible_by_seed():
    X, y = toy()
    a = DBKRegressor(**SMALL, seed=3).fit(X, y).predict(X)
    b = DBKRegressor(**SMALL, seed=3).fit(X, y).predict(X)
    c = DBKRegressor(**SMALL, seed=4).fit(X, y).predict(X)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


def test_early_stopping_restores_the_best_state():
    module = torch.nn.Linear(1, 1)
    values = iter([9.0, 5.0, 3.0, 1.0, 2.0, 4.0, 6.0, 7.0, 8.0])  # the first before any step
    steps = []

    def step():
        with torch.no_grad():
            module.weight.fill_(float(len(steps)))
        steps.append(1)
        return 0.0

    log = train(module, step, n_steps=100, validate=lambda: next(values), eval_every=1, patience=3,
                verbose=False)
    assert log.best_step == 3 and log.steps == 6 and log.stopped_early
    assert module.weight.item() == 2.0  # the weight written at step 3


def test_early_stopping_can_keep_the_initial_state():
    module = torch.nn.Linear(1, 1)
    initial = module.weight.item()
    values = iter([1.0, 2.0, 3.0, 4.0, 5.0])

    def step():
        with torch.no_grad():
            module.weight.add_(1.0)
        return 0.0

    log = train(module, step, n_steps=100, validate=lambda: next(values), eval_every=1, patience=3, verbose=False)
    assert log.best_step == 0 and log.steps == 3 and log.history[0][0] == 0
    assert module.weight.item() == initial


def test_a_numerical_failure_after_the_first_step_stops_training_and_keeps_the_best_state():
    module = torch.nn.Linear(1, 1)
    values = iter([9.0, 5.0, 3.0, 4.0])  # the first before any step

    def step():
        with torch.no_grad():
            module.weight.add_(1.0)
        if module.weight.item() > 3.5 + initial:
            raise FloatingPointError("Cholesky of ΦᵀΦ + σ²I failed")
        return 0.0

    initial = module.weight.item()
    with pytest.warns(RuntimeWarning, match=r"step 4: FloatingPointError: Cholesky.*state of step 2 is kept"):
        log = train(module, step, n_steps=100, validate=lambda: next(values), eval_every=1, patience=50,
                    verbose=False)
    assert log.steps == 4 and log.best_step == 2 and log.stopped_early and "Cholesky" in log.failure
    assert module.weight.item() == pytest.approx(initial + 2.0)


def test_a_numerical_failure_at_the_first_step_is_raised():
    def step():
        raise FloatingPointError("Cholesky of ΦᵀΦ + σ²I failed")

    with pytest.raises(FloatingPointError, match="Cholesky"):
        train(torch.nn.Linear(1, 1), step, n_steps=10, verbose=False)


def test_fit_with_correction_learns_the_noise_on_step_function():
    ds = neuralgp.datasets.load("synthetic/step1d", n=500, seed=0)
    model = DBKRegressor(backbone="mlp", rank=32, max_iter=1500, lr=3e-3, verbose=False)
    model.fit(ds.X_train, ds.y_train, ds.X_val, ds.y_val)
    mean, std = model.predict(ds.X_test, return_std=True)
    report = neuralgp.metrics.regression_report(ds.y_test, mean, std)
    assert 0.004 < model.noise_variance_ < 0.02  # true noise variance 0.01
    assert report["rmse"] < 0.13 and 0.88 < report["coverage_95"] < 0.99


@pytest.mark.parametrize("normalize,trace", [(True, False), (False, True), (False, False)])
def test_chunked_and_blockwise_gradients_equal_full_batch_gradient(normalize, trace):
    from neuralgp.posterior import chunked_exact_backward, exact_objective
    from neuralgp.posterior.objectives import blockwise_exact_backward
    X, y = toy(n=90)
    est = DBKRegressor(rank=6, hidden=8, normalize_features=normalize)
    torch.manual_seed(0)
    module = est.build_module(2).double()
    Xt, yt = torch.as_tensor(X), torch.as_tensor(y - y.mean())
    loss_full = -exact_objective(module, Xt, yt, trace) / len(yt)
    loss_full.backward()
    full = {k: p.grad.clone() for k, p in module.named_parameters()}
    module.zero_grad()
    loss_chunked = chunked_exact_backward(module, Xt, yt, trace, chunk_size=17)
    assert loss_chunked == pytest.approx(loss_full.item(), rel=1e-12)
    for k, p in module.named_parameters():
        torch.testing.assert_close(p.grad, full[k], rtol=1e-9, atol=1e-12, msg=k)
    module.zero_grad()
    loss_blocks = blockwise_exact_backward(module, Xt, yt, trace, block_rows=16)  # 6 blocks, the last of 10
    assert loss_blocks == pytest.approx(loss_full.item(), rel=1e-12)
    for k, p in module.named_parameters():
        torch.testing.assert_close(p.grad, full[k], rtol=1e-9, atol=1e-12, msg=k)


def test_chunked_training_is_used_above_chunk_size():
    X, y = toy(n=200)
    a = DBKRegressor(**{**SMALL, "max_iter": 20}, chunk_size=64).fit(X, y).predict(X)
    b = DBKRegressor(**{**SMALL, "max_iter": 20}, chunk_size=None).fit(X, y).predict(X)
    np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)  # float32 networks: same path up to rounding


def test_time_budget_stops_promptly_and_validates_once_more():
    import time as _time
    module = torch.nn.Linear(1, 1)
    calls = []

    def validate():
        calls.append(1)
        return 1.0

    log = train(module, lambda: _time.sleep(0.02) or 0.0, n_steps=10000, validate=validate, eval_every=1000,
                max_seconds=0.1, verbose=False)
    assert log.out_of_time and log.steps < 50 and len(calls) == 2  # before the first step and once more at the end
    assert log.best_step == 0  # no improvement on the initial state: it is kept


def test_resnet_depth_counts_residual_blocks():
    from neuralgp.features.networks import ResNetMLP, build_backbone
    net = build_backbone("resnet", 26, 128, hidden=128, depth=2, activation="tanh")
    assert isinstance(net, ResNetMLP) and len(net.blocks) == 2  # the paper's "2-layer ResNet": two residual blocks
    assert sum(p.numel() for p in net.parameters()) == (26 + 1) * 128 + 2 * 129 * 128 + 129 * 128
    assert DBKRegressor().depth == 2
    x = torch.randn(5, 26)
    h = net.inp(x)
    for block in net.blocks:
        h = h + block(h)
    assert torch.equal(net(x), net.out(h))


def test_plain_fit_holds_out_a_validation_fraction_and_recalibrates_on_it():
    X, y = toy(200)
    params = {**SMALL, "validation_fraction": 0.2, "recalibration": "validation"}  # 40 rows: cross-fit by default
    model = DBKRegressor(**params).fit(X, y)
    X_tr, y_tr, X_val, y_val = DBKRegressor(**params)._hold_out_validation(X, y)
    assert len(y_val) == 40 and len(y_tr) == 160
    mean, std = model.predict(X_val, return_std=True)
    gamma = selection_optimism(model.train_log_.validation_points)  # early stopping's pick, corrected
    z2 = ((y_val - mean) / std) ** 2  # recalibrated on these: α = (mean z² + K standard errors) · γ
    assert (z2.mean() + K * z2.std(ddof=1) / np.sqrt(len(z2))) * gamma == pytest.approx(1, rel=1e-6)
    assert model.variance_scale != 1.0
    unscaled = DBKRegressor(**{**params, "recalibration": False}).fit(X, y)
    assert unscaled.variance_scale == 1.0


def test_plain_fit_holds_out_enough_rows_to_recalibrate():
    X, y = toy(90)
    params = {**SMALL, "validation_fraction": 0.1}
    assert len(DBKRegressor(**params)._hold_out_validation(X, y)[3]) == 10  # not 9: recalibration needs 10
    assert DBKRegressor(**{**params, "recalibration": "validation"}).fit(X, y).variance_scale != 1.0
    assert len(DBKRegressor(**{**params, "recalibration": False})._hold_out_validation(X, y)[3]) == 9
    assert len(DBKRegressor(**params)._hold_out_validation(X[:49], y[:49])[3]) == 5  # too few rows to spare 10


@pytest.mark.cross_fit
def test_too_few_validation_points_leave_the_variances_unscaled():
    X, y = toy(40)
    params = {**SMALL, "recalibration": "validation"}  # on the validation part alone
    model = DBKRegressor(**params).fit(X[:31], y[:31], X[31:], y[31:])  # 9 validation points: no usable α
    assert model.variance_scale == 1.0
    assert DBKRegressor(**params).fit(X[:30], y[:30], X[30:], y[30:]).variance_scale != 1.0  # 10 points: scaled
    cross_fit = DBKRegressor(**SMALL, bagging=0).fit(X[:31], y[:31], X[31:], y[31:])  # α on all 40 rows
    assert cross_fit.recalibrated_by_ == "cross_fit" and cross_fit.variance_scale != 1.0


def test_recalibrated_validation_nll_selects_what_fit_returns():
    X, y = toy(150)
    model = DBKRegressor(**{**SMALL, "validation_fraction": 0.2, "eval_every": 10, "recalibration": "validation"})
    model.fit(X, y)
    _, _, X_val, y_val = model._hold_out_validation(X, y)
    mean, std = model.predict(X_val, return_std=True)
    from neuralgp.metrics import nll
    sd = model.y_scaler_.scale_[0]
    # the criterion scales by the plain mean z² (fit's α adds its standard error and γ on top)
    std = std * np.sqrt(np.mean(((y_val - mean) / std) ** 2))
    assert nll(y_val / sd, mean / sd, std / sd) == pytest.approx(model.train_log_.best_val_nll, abs=1e-4)


def _dense_log_evidence(U, y, noise, scale2):
    """log N(y; 0, scale2 · UUᵀ + noise · I), formed densely."""
    K = scale2 * U @ U.T + noise * np.eye(len(y))
    sign, logdet = np.linalg.slogdet(K)
    return -0.5 * (len(y) * np.log(2 * np.pi) + logdet + y @ np.linalg.solve(K, y))


def test_init_hyperparameters_maximise_the_dense_marginal_likelihood_of_the_untrained_features():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (60, 3))
    y = np.sin(3 * X[:, 0]) + 0.3 * rng.standard_normal(60)
    model = DBKRegressor(rank=8, hidden=16, init_hyperparameters=True, seed=0, verbose=False)
    torch.manual_seed(0)
    model.module_ = model.build_module(3)
    Xt, yt = torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y)
    with torch.no_grad():
        U = model.module_(Xt).double().numpy() / np.exp(model.module_.net.log_scale.item())  # unit rows
    model._prepare(Xt, yt)
    noise, scale2 = model.module_.noise().item(), np.exp(2 * model.module_.net.log_scale.item())
    assert noise != pytest.approx(0.1) and scale2 != pytest.approx(1.0)  # both moved from their initial values
    best = _dense_log_evidence(U, y, noise, scale2)
    for dn, ds in [(1.05, 1), (0.95, 1), (1, 1.05), (1, 0.95), (1.02, 0.98)]:  # a maximum: every neighbour is lower
        assert _dense_log_evidence(U, y, noise * dn, scale2 * ds) < best
    with torch.no_grad():  # the network itself is untouched: only σ² and s moved
        assert np.allclose(model.module_(Xt).double().numpy(), U * np.sqrt(scale2), atol=1e-5)


def test_init_hyperparameters_starts_the_fit_from_the_fitted_random_feature_gp():
    rng = np.random.default_rng(1)
    X = rng.uniform(-1, 1, (80, 2))
    y = X[:, 0] + 0.5 * rng.standard_normal(80)  # noisy: σ² from 0.1 towards 0.25 / var(y)
    params = dict(rank=8, hidden=16, max_iter=0, validation_fraction=0.0, recalibration=False, bagging=0,
                  verbose=False)
    plain = DBKRegressor(init_hyperparameters=False, **params).fit(X, y)
    warm = DBKRegressor(init_hyperparameters=True, **params).fit(X, y)
    assert plain.module_.noise().item() == pytest.approx(0.1)
    assert warm.module_.noise().item() > 0.3  # the standardised targets' noise share is about 0.5
    assert warm.n_iter_ == 0


@pytest.mark.parametrize("params", [dict(inference="svi"), dict(normalize_features=False)])
def test_init_hyperparameters_needs_exact_inference_with_constant_norm_features(params):
    X, y = np.random.default_rng(0).normal(size=(30, 2)), np.arange(30.0)
    model = DBKRegressor(init_hyperparameters=True, max_iter=1, verbose=False, **params)
    with pytest.raises(neuralgp.errors.ParameterError, match="init_hyperparameters"):
        model.fit(X, y)
    assert not hasattr(model, "module_") and not hasattr(model, "x_scaler_")  # nothing half fitted


def test_init_hyperparameters_auto_fits_the_start_on_small_exact_fits_only(monkeypatch, tmp_path):
    import neuralgp.models.dbk as dbk
    rng = np.random.default_rng(1)
    X = rng.uniform(-1, 1, (80, 2))
    y = X[:, 0] + 0.5 * rng.standard_normal(80)  # noisy: the random features fit it at a moderate scale
    params = dict(rank=8, hidden=16, max_iter=0, validation_fraction=0.0, recalibration=False, bagging=0,
                  verbose=False)
    assert DBKRegressor().init_hyperparameters == "auto"
    model = DBKRegressor(**params).fit(X, y)
    assert model.fitted_start_ and model.module_.noise().item() > 0.3  # 80 rows: fitted
    model.save(tmp_path / "m.pt")
    assert neuralgp.load(tmp_path / "m.pt").fitted_start_  # kept with the model
    monkeypatch.setattr(dbk, "FITTED_START_MAX_ROWS", 79)
    model = DBKRegressor(**params).fit(X, y)
    assert not model.fitted_start_ and model.module_.noise().item() == pytest.approx(0.1)  # past the size: not
    monkeypatch.setattr(dbk, "FITTED_START_MAX_ROWS", 80)
    assert DBKRegressor(**params).fit(X, y).fitted_start_
    for other in (dict(normalize_features=False), dict(inference="svi", max_epochs=0)):  # not there: no error either
        model = DBKRegressor(**{**params, **other}).fit(X, y)
        assert not model.fitted_start_ and model.module_.noise().item() == pytest.approx(0.1)


def test_init_hyperparameters_where_the_evidence_drives_the_noise_to_a_singular_gram(monkeypatch):
    import neuralgp.models.dbk as dbk

    class SingularBelow(dbk.ExactPosterior):  # as a Cholesky of c·ΦᵀΦ + σ²I fails once σ² is tiny against c
        def __init__(self, stats, noise, outputscale=None):
            if float(noise) < 1e-3:
                raise FloatingPointError("Cholesky of ΦᵀΦ + σ²I failed")
            super().__init__(stats, noise, outputscale)
    monkeypatch.setattr(dbk, "ExactPosterior", SingularBelow)
    rng = np.random.default_rng(2)
    X = rng.uniform(-1, 1, (120, 2))
    y = np.sin(2 * X[:, 0]) + X[:, 1]  # noiseless: the evidence wants σ² → 0
    params = dict(rank=32, hidden=16, max_iter=0, validation_fraction=0.0, recalibration=False, bagging=0,
                  verbose=False)
    auto = DBKRegressor(**params).fit(X, y)  # "auto": the module's own start, no error
    assert not auto.fitted_start_ and auto.module_.noise().item() == pytest.approx(0.1)
    with pytest.warns(RuntimeWarning, match="grows without bound"):  # True (also a bag member's): said, same start
        forced = DBKRegressor(init_hyperparameters=True, **params).fit(X, y)
    assert not forced.fitted_start_ and forced.module_.noise().item() == pytest.approx(0.1)


def test_init_hyperparameters_auto_keeps_the_default_start_where_the_evidence_wants_a_large_scale():
    rng = np.random.default_rng(2)
    X = rng.uniform(-1, 1, (120, 2))
    y = np.sin(2 * X[:, 0]) + X[:, 1]  # noiseless: the evidence raises s² about 10⁶-fold (True takes that)
    params = dict(rank=32, hidden=16, max_iter=0, validation_fraction=0.0, recalibration=False, bagging=0,
                  verbose=False)
    auto = DBKRegressor(**params).fit(X, y)
    forced = DBKRegressor(init_hyperparameters=True, **params).fit(X, y)
    assert not auto.fitted_start_ and auto.module_.noise().item() == pytest.approx(0.1)
    assert forced.fitted_start_ and forced.module_.noise().item() < 1e-3
    assert forced.module_.net.log_scale.item() - auto.module_.net.log_scale.item() > 0.5 * np.log(50)


@pytest.mark.parametrize("noise", [0.5, 0.0])
def test_a_bags_members_start_as_the_fit_did(noise):
    rng = np.random.default_rng(3)
    X = rng.uniform(-1, 1, (120, 2))
    y = np.sin(2 * X[:, 0]) + X[:, 1] + noise * rng.standard_normal(120)
    model = DBKRegressor(rank=32, hidden=16, max_iter=5, bagging=2, verbose=False).fit(X, y)
    assert model.fitted_start_ == (noise > 0)
    assert [member.init_hyperparameters for member in model.members_] == [model.fitted_start_] * 2

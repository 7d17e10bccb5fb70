"""FM-GP and GPnn against dense GP algebra; recalibration; Dirichlet classification; bad input."""

import math

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from neuralgp import FMGPClassifier, FMGPRegressor, InputError, GPnnRegressor, load
from neuralgp import chunking
from neuralgp.cli import main
from neuralgp.features import MLP, ProductFeatures, SumFeatures
from neuralgp.posterior import ExactPosterior, gram_stats
from neuralgp.models.base import RECALIBRATION_STANDARD_ERRORS as K
from neuralgp.posterior.dirichlet import class_gram, dirichlet_stats, dirichlet_targets

D = torch.float64


def toy(n=120, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, d))
    return X, np.sin(2 * X[:, 0]) + 0.3 * X[:, 1] ** 2 + 0.1 * rng.standard_normal(n) + 3.0


def small_fmgp(**kw):
    return FMGPRegressor(**{"feature_dim": 8, "hidden": 32, "max_iter": 30, "lr": 1e-2, "verbose": False,
                            "validation_fraction": 0.0, **kw})


@pytest.mark.parametrize("n,p", [(40, 6), (5, 12)])
def test_scaled_posterior_equals_dense_gp(n, p, dense_gp):
    """k = σ_f²ψᵀψ + σ²δ: LML (Sylvester, also n < p), mean and variances equal the dense GP."""
    g = torch.Generator().manual_seed(1)
    psi, y, psi_star = torch.randn(n, p, generator=g, dtype=D), torch.randn(n, generator=g, dtype=D), \
        torch.randn(7, p, generator=g, dtype=D)
    sf2, s2 = torch.tensor(2.5, dtype=D), torch.tensor(0.3, dtype=D)
    post = ExactPosterior(gram_stats(psi, y), s2, sf2)
    d_mean, d_var, K = dense_gp(sf2 * psi @ psi.T, sf2 * psi @ psi_star.T, sf2 * (psi_star ** 2).sum(-1), y, s2)
    dense = multivariate_normal(np.zeros(n), K.numpy()).logpdf(y.numpy())
    assert post.log_marginal_likelihood().item() == pytest.approx(dense, rel=1e-10)
    mean, var_f, var_y = post.predict(psi_star)
    torch.testing.assert_close(mean, d_mean, rtol=1e-8, atol=1e-8)
    torch.testing.assert_close(var_f, d_var, rtol=1e-8, atol=1e-8)
    torch.testing.assert_close(var_y, d_var + s2, rtol=1e-8, atol=1e-8)
    # recalibration by α: same mean, every variance × α
    re = post.recalibrated(3.0)
    m2, vf2, vy2 = re.predict(psi_star)
    torch.testing.assert_close(m2, mean)
    torch.testing.assert_close(vy2, 3.0 * var_y)


def test_scaled_lml_gradcheck():
    g = torch.Generator().manual_seed(2)
    psi = torch.randn(15, 4, generator=g, dtype=D, requires_grad=True)
    y = torch.randn(15, generator=g, dtype=D)
    raw = torch.tensor([0.4, -0.3], dtype=D, requires_grad=True)
    torch.autograd.gradcheck(
        lambda p, r: ExactPosterior(gram_stats(p, y), r[0].exp(), r[1].exp()).log_marginal_likelihood(), (psi, raw))


@pytest.mark.parametrize("normalize_y", [False, True])
def test_fitted_regressor_equals_dense_gp_from_its_features(normalize_y, dense_gp):
    X, y = toy()
    model = small_fmgp(normalize_y=normalize_y).fit(X, y)
    Xs = X[:25] + 0.1
    mean, std = model.predict(Xs, return_std=True)
    Psi, Psi_s = model.features(X), model.features(Xs)
    offset = y.mean() if normalize_y else 0.0
    sf2 = model.outputscale_
    d_mean, d_var_f, _ = dense_gp(sf2 * Psi @ Psi.T, sf2 * Psi @ Psi_s.T, sf2 * (Psi_s ** 2).sum(1), y,
                                  model.noise_variance_, offset=offset)
    np.testing.assert_allclose(mean, d_mean, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(std, np.sqrt(d_var_f + model.noise_variance_), rtol=1e-6, atol=1e-6)


def test_recalibration_makes_calibration_z2_one_and_survives_save(tmp_path):
    X, y = toy()
    X_cal, y_cal = toy(60, seed=5)
    model = small_fmgp().fit(X, y)
    mean_before = model.predict(X_cal)
    model.recalibrate(X_cal, y_cal)
    mean, std = model.predict(X_cal, return_std=True)
    np.testing.assert_allclose(mean, mean_before)
    assert np.mean(((y_cal - mean) / std) ** 2) == pytest.approx(1.0, rel=1e-10)
    assert model.variance_scale != 1.0
    model.save(tmp_path / "m.pt")
    loaded = load(tmp_path / "m.pt")
    m2, s2 = loaded.predict(X_cal, return_std=True)
    np.testing.assert_array_equal(m2, mean)
    np.testing.assert_array_equal(s2, std)
    assert loaded.outputscale_ == model.outputscale_
    # fit(X, y, X_cal, y_cal) recalibrates in one call, K standard errors of the mean z² higher
    one_call = small_fmgp().fit(X, y, X_cal, y_cal)
    z2 = ((y_cal - mean) / std) ** 2  # mean 1 after recalibrate
    upper = 1 + K * z2.std(ddof=1) / np.sqrt(len(z2))
    assert one_call.variance_scale == pytest.approx(model.variance_scale * upper, rel=1e-10)


def test_product_and_sum_features():
    torch.manual_seed(0)
    f1, f2 = MLP(3, 4, hidden=8), MLP(3, 5, hidden=8)
    x = torch.randn(30, 3)
    with torch.no_grad():
        a, b, xi = f1(x).double(), f2(x).double(), ProductFeatures(f1, f2)(x).double()
        s = SumFeatures(f1, f2)(x).double()
    assert xi.shape == (30, 20)
    torch.testing.assert_close(xi @ xi.T, (a @ a.T) * (b @ b.T), rtol=1e-5, atol=1e-5)
    i, j = 2, 3  # column i + j·p₁ is φ₁,ᵢ · φ₂,ⱼ (the paper's [i + (j−1)p₁], 1-based)
    torch.testing.assert_close(xi[:, i + j * 4], a[:, i] * b[:, j], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(s @ s.T, a @ a.T + b @ b.T, rtol=1e-5, atol=1e-5)
    X, y = toy()
    model = small_fmgp(product=(3, 4), unit_norm=True).fit(X, y)
    assert model.features(X).shape == (len(y), 12)
    np.testing.assert_allclose((model.features(X) ** 2).sum(1), 1.0, rtol=1e-5)  # weak stationarity
    additive = small_fmgp(additive=(3, 5), norm="batch", max_iter=5).fit(X, y)
    assert additive.features(X).shape == (len(y), 8)
    np.testing.assert_allclose(additive.features(X[:7]), additive.features(X)[:7], rtol=1e-5, atol=1e-6)  # eval BN


def test_dirichlet_targets_match_the_spec():
    t = dirichlet_targets(0.01)
    assert t["y_in"] == pytest.approx(-0.334142, abs=1e-6) and t["s_in"] == pytest.approx(0.688184, abs=1e-6)
    assert t["y_out"] == pytest.approx(-6.912730, abs=1e-6) and t["s_out"] == pytest.approx(4.615121, abs=1e-6)


@pytest.mark.parametrize("heteroscedastic", [True, False])
def test_two_value_statistics_equal_dense_per_class_gps(heteroscedastic):
    """The shared-Φ statistics give, per class, the LML of N(ỹ_c − m_c; 0, σ_f²ΨΨᵀ + σ_c² diag(s_c))."""
    g = torch.Generator().manual_seed(3)
    n, p, C = 30, 5, 3
    psi = torch.randn(n, p, generator=g, dtype=D)
    labels = torch.randint(0, C, (n,), generator=g)
    mean = torch.tensor([-1.0, -2.0, -3.0], dtype=D)
    noise, scale = torch.tensor([0.7, 1.1, 1.3], dtype=D), torch.tensor([2.0, 0.5, 1.5], dtype=D)
    stats = dirichlet_stats(class_gram(psi, labels, C), mean, heteroscedastic)
    lml = ExactPosterior(stats, noise, scale).log_marginal_likelihood()
    t = dirichlet_targets()
    for c in range(C):
        mine = labels == c
        two = lambda a, b: torch.where(mine, torch.tensor(a, dtype=D), torch.tensor(b, dtype=D))  # noqa: E731
        y = two(t["y_in"], t["y_out"]) - mean[c]
        s = two(t["s_in"], t["s_out"]) if heteroscedastic else torch.ones(n, dtype=D)
        K = scale[c] * psi @ psi.T + noise[c] * torch.diag(s)
        dense = multivariate_normal(np.zeros(n), K.numpy()).logpdf(y.numpy())
        assert lml[c].item() == pytest.approx(dense, rel=1e-10)


def classification_toy(n=200, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, 2))
    return X, (X[:, 0] > 0).astype(int) + 2 * (X[:, 1] > 0.5)  # labels 0, 1, 2, 3


def test_classifier_probabilities_temperature_and_persistence(tmp_path):
    X, y = classification_toy()
    X_cal, y_cal = classification_toy(80, seed=1)
    clf = FMGPClassifier(feature_dim=8, hidden=32, max_iter=40, lr=1e-2, n_samples=64, verbose=False)
    clf.fit(X, y * 10, X_cal, y_cal * 10)  # any integer labels
    proba = clf.predict_proba(X_cal)
    assert proba.shape == (80, 4)
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-6)
    assert set(np.unique(clf.predict(X_cal))) <= {0, 10, 20, 30}
    assert np.mean(clf.predict(X_cal) == y_cal * 10) > 0.8
    pred_t = clf.predict(X_cal)
    clf.temperature_ = 1.0
    np.testing.assert_array_equal(clf.predict(X_cal), pred_t)  # T does not move the argmax... (near-ties aside)
    clf.calibrate_temperature(X_cal, y_cal * 10)
    clf.save(tmp_path / "c.pt")
    np.testing.assert_array_equal(load(tmp_path / "c.pt").predict_proba(X_cal), clf.predict_proba(X_cal))


def test_classifier_full_data_statistics_in_chunks_equal_one_pass(monkeypatch):
    X, y = classification_toy(90)
    one = FMGPClassifier(feature_dim=4, hidden=8, max_iter=3, verbose=False).fit(X, y)
    monkeypatch.setattr(chunking, "NO_GRAD_ROWS", 16)  # 6 chunks, the last one partial
    chunked = FMGPClassifier(feature_dim=4, hidden=8, max_iter=3, verbose=False).fit(X, y)
    a, b = one.posterior_.stats, chunked.posterior_.stats
    assert a.n == b.n == 90
    for x, z in ((a.A, b.A), (a.b, b.b), (a.c, b.c), (a.logdet_d, b.logdet_d)):
        torch.testing.assert_close(x, z, rtol=1e-10, atol=1e-10)


def test_classifier_bad_input():
    X, y = classification_toy(40)
    clf = FMGPClassifier(feature_dim=4, hidden=8, max_iter=2, verbose=False)
    with pytest.raises(InputError, match="Unknown label type: continuous"):
        clf.fit(X, y + 0.5)
    with pytest.raises(InputError, match="y has 1 class"):
        clf.fit(X, np.zeros(40, dtype=int))
    X_nan = X.copy()
    X_nan[3, 1] = np.nan
    with pytest.raises(InputError, match="NaN"):
        clf.fit(X_nan, y)
    with pytest.raises(InputError, match="not in y"):
        clf.fit(X, y, X[:5], np.array([0, 1, 2, 3, 7]))
    assert not hasattr(clf, "classes_")


def test_gpnn_with_all_points_as_neighbours_equals_the_exact_gp():
    X, y = toy(80)
    model = GPnnRegressor(n_neighbors=500, max_iter=20, normalize_y=False, input_scaling="none", verbose=False,
                          validation_fraction=0.0)
    model.fit(X, y)
    Xq = X[:10] + 0.05
    mean, std = model.predict(Xq, return_std=True)
    with torch.no_grad():
        K = model.covar_(torch.as_tensor(X)).to_dense().numpy()
        ks = model.covar_(torch.as_tensor(Xq), torch.as_tensor(X)).to_dense().numpy()
        prior = float(model.covar_.outputscale)
    S = K + model.noise_variance_ * np.eye(len(y))
    np.testing.assert_allclose(mean, ks @ np.linalg.solve(S, y), rtol=1e-8, atol=1e-8)
    var = prior - (ks * np.linalg.solve(S, ks.T).T).sum(1) + model.noise_variance_
    np.testing.assert_allclose(std, np.sqrt(var), rtol=1e-8, atol=1e-8)


def test_cli_fit_fmgp_json(capsys):
    assert main(["fit", "--dataset", "uci/yacht", "--model", "fmgp", "--split", "holdout:0.2:0.2",
                 "--max-iter", "5", "--rank", "8", "--json", "--quiet"]) == 0
    import json
    out = json.loads(capsys.readouterr().out)
    assert out["split"] == "holdout:0.2:0.2" and out["n_train"] == 184 and out["n_test"] == 62
    for key in ("mse", "nll", "mean_z2", "train_seconds", "predict_seconds_per_point"):
        assert math.isfinite(out[key])
    assert out["variance_scale"] != 1.0  # recalibrated on the validation part


def test_recalibrate_bad_input_leaves_the_model_unchanged():
    X, y = toy()
    model = small_fmgp(max_iter=3).fit(X, y)
    with pytest.raises(InputError, match="features"):
        model.recalibrate(X[:, :2], y)
    with pytest.raises(InputError, match="rows"):
        model.recalibrate(X[:10], y[:9])
    assert model.variance_scale == 1.0
    with pytest.raises(InputError, match="X_cal"):
        small_fmgp(max_iter=3).fit(X, y, X[:, :2], y)


def test_network_classifier_and_var_kernel(tmp_path):
    from neuralgp import NetworkClassifier, SVGPClassifier, SVGPRegressor
    X, y = classification_toy()
    clf = NetworkClassifier(hidden=16, max_epochs=3, verbose=False).fit(X, y, X[:50], y[:50])
    clf.save(tmp_path / "n.pt")
    np.testing.assert_array_equal(load(tmp_path / "n.pt").predict_proba(X), clf.predict_proba(X))
    Xr, yr = toy(100)
    var = SVGPRegressor(base_kernel="matern12", num_inducing=20, max_epochs=2, verbose=False).fit(Xr, yr)
    svc = SVGPClassifier(num_inducing=10, max_epochs=2, n_samples=8, verbose=False).fit(X, y, X[:50], y[:50])
    svc.save(tmp_path / "s.pt")
    np.testing.assert_array_equal(load(tmp_path / "s.pt").predict_proba(X), svc.predict_proba(X))
    assert "MaternKernel" in type(var.model_.gp.covar_module.base_kernel).__name__
    with pytest.raises(ValueError, match="base_kernel"):
        SVGPRegressor(base_kernel="cosine", max_epochs=1, verbose=False).fit(Xr, yr)


def test_cli_fit_classifier_and_predict_probabilities(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["fit", "--dataset", "digits", "--model", "fmgp", "--split", "holdout:0.2:0.2", "--max-iter", "3",
                 "--rank", "8", "--quiet", "--out", str(out)]) == 0
    assert "temperature" in capsys.readouterr().out
    inputs = tmp_path / "x.csv"
    np.savetxt(inputs, np.random.default_rng(0).uniform(0, 16, (4, 64)), delimiter=",")
    assert main(["predict", str(out / "model.pt"), str(inputs), "--output", str(tmp_path / "p.csv")]) == 0
    rows = (tmp_path / "p.csv").read_text().splitlines()
    assert rows[0].split(",")[:3] == ["label", "p_0", "p_1"] and len(rows) == 5
    assert abs(sum(map(float, rows[1].split(",")[1:])) - 1) < 1e-6
    assert main(["fit", "--dataset", "digits", "--model", "dbk", "--quiet"]) == 2  # only fmgp classifies


def test_calibrate_temperature_refuses_unknown_classes():
    X, y = classification_toy(60)
    from neuralgp import NetworkClassifier
    clf = NetworkClassifier(hidden=8, max_epochs=1, verbose=False)
    clf.fit(X, y)
    with pytest.raises(InputError, match="not in y"):
        clf.calibrate_temperature(X[:4], np.array([0, 1, 2, 9]))
    assert clf.temperature_ == 1.0

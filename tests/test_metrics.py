"""Metrics against independent references (scipy.stats, numerical integration, scikit-learn)."""

import numpy as np
import pytest
from scipy import integrate, stats
from sklearn.metrics import accuracy_score, brier_score_loss, log_loss

from neuralgp import metrics

rng = np.random.default_rng(0)
Y, MEAN, STD = rng.normal(size=50), rng.normal(size=50), rng.uniform(0.3, 2.0, size=50)


def test_point_errors():
    assert metrics.mae(Y, MEAN) == pytest.approx(np.abs(Y - MEAN).mean())
    assert metrics.rmse(Y, MEAN) == pytest.approx(np.sqrt(((Y - MEAN) ** 2).mean()))


def test_nll_matches_scipy():
    assert metrics.nll(Y, MEAN, STD) == pytest.approx(-stats.norm.logpdf(Y, MEAN, STD).mean(), rel=1e-12)


def test_crps_matches_numerical_integral():
    def crps_one(y, m, s):
        f = lambda z: (stats.norm.cdf(z, m, s) - (z >= y)) ** 2  # noqa: E731
        lo, hi = m - 12 * s, m + 12 * s
        return integrate.quad(f, lo, y, limit=200)[0] + integrate.quad(f, y, hi, limit=200)[0]
    ref = np.mean([crps_one(*t) for t in zip(Y[:10], MEAN[:10], STD[:10])])
    assert metrics.crps(Y[:10], MEAN[:10], STD[:10]) == pytest.approx(ref, rel=1e-6)


def test_coverage_and_z2():
    for level in (0.5, 0.9, 0.95):
        lo, hi = stats.norm.interval(level, MEAN, STD)
        assert metrics.coverage(Y, MEAN, STD, level) == pytest.approx(np.mean((Y >= lo) & (Y <= hi)))
    big = rng.normal(size=200000)
    assert metrics.coverage(big, 0 * big, 1 + 0 * big, 0.9) == pytest.approx(0.9, abs=0.005)
    assert metrics.mean_z2(big, 0 * big, 1 + 0 * big) == pytest.approx(1.0, abs=0.01)


DF = 3.5
T_SCALE = STD * np.sqrt((DF - 2) / DF)  # the t with DF degrees of freedom whose std is STD


def test_student_t_nll_cdf_quantile_and_coverage_match_scipy():
    assert metrics.nll(Y, MEAN, STD, df=DF) == pytest.approx(-stats.t.logpdf(Y, DF, MEAN, T_SCALE).mean(), rel=1e-12)
    assert stats.t.std(DF, scale=T_SCALE) == pytest.approx(STD)
    z = (Y - MEAN) / STD
    assert np.allclose(metrics.cdf(z, DF), stats.t.cdf(Y, DF, MEAN, T_SCALE), rtol=1e-12)
    assert np.allclose(metrics.cdf(metrics.quantile([0.05, 0.5, 0.9], DF), DF), [0.05, 0.5, 0.9])
    for level in (0.5, 0.9, 0.95):
        lo, hi = stats.t.interval(level, DF, MEAN, T_SCALE)
        assert metrics.coverage(Y, MEAN, STD, level, df=DF) == pytest.approx(np.mean((Y >= lo) & (Y <= hi)))
    # a large df is the Gaussian
    assert metrics.nll(Y, MEAN, STD, df=1e7) == pytest.approx(metrics.nll(Y, MEAN, STD), rel=1e-5)
    with pytest.raises(ValueError, match="df > 2"):
        metrics.nll(Y, MEAN, STD, df=2.0)


def test_student_t_crps_matches_numerical_integral():
    def crps_one(y, m, s):
        f = lambda x: (stats.t.cdf(x, DF, m, s) - (x >= y)) ** 2  # noqa: E731
        return integrate.quad(f, -np.inf, y, limit=400)[0] + integrate.quad(f, y, np.inf, limit=400)[0]
    ref = np.mean([crps_one(*t) for t in zip(Y[:10], MEAN[:10], T_SCALE[:10])])
    assert metrics.crps(Y[:10], MEAN[:10], STD[:10], df=DF) == pytest.approx(ref, rel=1e-6)


def test_student_t_pit_of_t_draws_is_uniform():
    big = stats.t.rvs(DF, scale=np.sqrt((DF - 2) / DF), size=200000, random_state=1)
    ones = np.ones_like(big)
    assert metrics.qice(big, 0 * big, ones, df=DF) < 0.3  # sampling error only
    assert metrics.qice(big, 0 * big, ones) > 1.0  # the Gaussian with the same variance misplaces the PIT


def test_regression_input_errors():
    with pytest.raises(ValueError, match="positive"):
        metrics.nll(Y, MEAN, 0 * STD)
    with pytest.raises(ValueError, match="equal lengths"):
        metrics.nll(Y, MEAN[:3], STD)


P = rng.dirichlet(np.ones(3), size=200)
LABELS = np.array([rng.choice(3, p=p) for p in P])


def test_classification_against_sklearn():
    assert metrics.accuracy(LABELS, P) == pytest.approx(accuracy_score(LABELS, P.argmax(1)))
    assert metrics.classification_nll(LABELS, P) == pytest.approx(log_loss(LABELS, P, labels=[0, 1, 2]))
    p2 = np.stack([1 - P[:, 0], P[:, 0]], 1)
    y2 = (LABELS == 0).astype(int)
    # multi-class Brier sums over both classes: twice scikit-learn's binary Brier
    assert metrics.brier(y2, p2) == pytest.approx(2 * brier_score_loss(y2, p2[:, 1]))


def test_ece_brute_force():
    conf, pred = P.max(1), P.argmax(1)
    edges = np.linspace(0, 1, 16)
    total = 0.0
    for lo, hi in zip(edges[:-1], edges[1:]):
        sel = (conf >= lo) & ((conf < hi) | (hi == 1.0))
        if sel.any():
            total += sel.sum() / len(conf) * abs((pred[sel] == LABELS[sel]).mean() - conf[sel].mean())
    assert metrics.ece(LABELS, P) == pytest.approx(total)
    perfect = np.eye(3)[LABELS]
    assert metrics.ece(LABELS, perfect) == 0.0 and metrics.brier(LABELS, perfect) == 0.0


def test_qice_on_hand_made_pit_values():
    from scipy.special import ndtri
    pit = np.array([0.15, 0.25, 0.35, 0.95])  # away from the bin edges
    y = ndtri(pit) * 2.0 + 1.0  # mean 1, std 2
    # M = 2: bins [0, .5) and [.5, 1] hold 3 and 1 points: (|3/4 − 1/2| + |1/4 − 1/2|) / 2 = 0.25
    assert metrics.qice(y, np.ones(4), 2 * np.ones(4), n_bins=2) == pytest.approx(25.0)
    assert metrics.qice(y, np.ones(4), 2 * np.ones(4), n_bins=10) == pytest.approx(100 * (4 * 0.15 + 6 * 0.1) / 10)
    rng = np.random.default_rng(0)
    z = rng.standard_normal(200_000)
    assert metrics.qice(z, np.zeros_like(z), np.ones_like(z)) < 0.3  # calibrated: near 0
    assert metrics.qice(z, z - 10, np.ones_like(z)) == pytest.approx(18.0)  # all in one bin: 100 · 2(M−1)/M²
    assert metrics.qice(z, np.zeros_like(z), 100 * np.ones_like(z)) == pytest.approx(16.0, abs=0.1)  # two middle bins


def test_hc_lc_rmse_groups_by_predicted_std():
    y = np.zeros(20)
    std = np.arange(1, 21, dtype=float)
    mean = std * 0.1  # errors grow with the std: confident points are the accurate ones
    hc, lc = metrics.hc_lc_rmse(y, mean, std, q=0.1)  # 2 points each
    assert hc == pytest.approx(np.sqrt((0.1 ** 2 + 0.2 ** 2) / 2))
    assert lc == pytest.approx(np.sqrt((1.9 ** 2 + 2.0 ** 2) / 2))
    report = metrics.regression_report(y, mean, std)
    assert report["hc_rmse"] == hc and report["lc_rmse"] == lc and "qice" in report

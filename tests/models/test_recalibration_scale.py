"""``recalibration_scale``: the variance scale ``fit`` sets on a validation part, mean z² plus a part of its standard
error."""

import numpy as np
import pytest

from neuralgp.models.base import RECALIBRATION_STANDARD_ERRORS as K, recalibration_scale


def _scale(z):
    z2 = z ** 2
    return recalibration_scale(z2.mean(), (z2 ** 2).mean(), len(z))


def test_is_the_mean_plus_k_standard_errors():
    z = np.random.default_rng(0).standard_normal(25) * 1.7
    z2 = z ** 2
    assert _scale(z) == pytest.approx(z2.mean() + K * z2.std(ddof=1) / np.sqrt(len(z)), rel=1e-12)
    assert recalibration_scale(2.0, 4.0, 1) == 2.0  # one row: no standard error, the mean


def test_heavy_tails_on_small_parts():
    """On 30 rows of heavy-tailed z (Student-t, 3 degrees of freedom, variance 1) the plain mean leaves the test
    mean z² (here 1/α) above 1.5 in about 43 % of draws (median 1.36); half a standard error up: 31 %, median 1.16.
    On Gaussian z the cost: the median test mean z² is about 0.91 (inside the suite's band [0.7, 1.5])."""
    assert K == 0.5  # the figures below are for ½
    rng = np.random.default_rng(0)
    heavy = [rng.standard_t(3, 30) / np.sqrt(3) for _ in range(2000)]
    plain = np.array([1 / np.mean(z ** 2) for z in heavy])
    upper = np.array([1 / _scale(z) for z in heavy])
    assert np.mean(plain > 1.5) > 0.35 and np.median(plain) > 1.3
    assert np.mean(upper > 1.5) < 0.35 and 1.05 < np.median(upper) < 1.25
    gauss = np.array([1 / _scale(rng.standard_normal(30)) for _ in range(2000)])
    assert 0.85 < np.median(gauss) < 0.95
    big = np.array([1 / _scale(rng.standard_normal(2000)) for _ in range(200)])
    assert 0.97 < np.median(big) < 1.0  # vanishes on large parts

"""Input scalers: a column constant in the training rows is centred, never divided by its round-off std."""

import numpy as np
import pytest

from neuralgp.datasets.scaling import Scaler


@pytest.mark.parametrize("value", [0.1, 1 / 3, 123.456])
def test_a_column_constant_in_training_is_not_divided_by_its_round_off_std(value):
    # uci/keggdirected's column 7 is constant in fold 1's training part; numpy's std of it is 8e-18, and the
    # division put a test value 1e17 standard deviations out (the plain network's RMSE there: 4e14)
    train = np.column_stack([np.full(1000, value), np.linspace(-1.0, 1.0, 1000)])
    assert train[:, 0].std() > 0  # the round-off the scaler has to see through
    scaler = Scaler("standard").fit(train)
    assert scaler.scale_[0] == 1.0 and scaler.shift_[0] == pytest.approx(value)
    assert scaler.transform([[value + 0.5, 0.0]])[0, 0] == pytest.approx(0.5)
    assert scaler.scale_[1] == pytest.approx(train[:, 1].std())  # varying columns as numpy's std


def test_a_nearly_constant_column_that_varies_is_still_standardised():
    train = np.column_stack([1e6 + np.arange(100) * 1e-4, np.arange(100.0)])
    scaler = Scaler("standard").fit(train)
    assert scaler.scale_[0] == pytest.approx(train[:, 0].std())
    assert np.allclose(scaler.transform(train).std(0), 1.0)

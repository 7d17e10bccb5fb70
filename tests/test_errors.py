"""Bad input: a clear error that names the problem, and nothing written."""

import pickle

import numpy as np
import pytest

import neuralgp
from neuralgp import DBKRegressor
from neuralgp.errors import DataError, InputError, ModelFileError, NotFittedError

X = np.random.default_rng(0).normal(size=(30, 3))
Y = X[:, 0] + 0.1 * np.random.default_rng(1).normal(size=30)
FAST = dict(rank=4, hidden=8, max_iter=5, verbose=False)


@pytest.mark.parametrize("Xb,yb,message", [
    (np.where(np.arange(90).reshape(30, 3) == 7, np.nan, X), Y, "X contains 1 NaN or infinite"),
    (X, np.where(np.arange(30) == 3, np.inf, Y), "y contains 1 NaN or infinite"),
    (X[:, 0], Y, r"X must be 2-D.*reshape\(-1, 1\)"),
    (X[None], Y, "X must be 2-D"),
    (X, Y[:-1], "X has 30 rows but y has 29"),
    (X[:1], Y[:1], "at least 2 samples to fit, got 1 sample"),
    (X, np.full(30, 2.5), "y is constant"),
    (np.array([["1", "a", "2"]] * 30), Y, "X has non-numeric values"),
    (X, np.ones((30, 2)), "y must be 1-D"),
    (np.empty((0, 3)), np.empty(0), "X has no rows"),
    (np.empty((30, 0)), Y, r"0 feature\(s\)"),
    (X + 1j, Y, "Complex data not supported"),
    (X, None, "requires y to be passed"),
])
def test_fit_rejects_bad_input(Xb, yb, message):
    model = DBKRegressor(**FAST)
    with pytest.raises(InputError, match=message):
        model.fit(Xb, yb)
    assert not hasattr(model, "module_") and not hasattr(model, "x_scaler_")


def test_validation_set_checks():
    with pytest.raises(InputError, match="both X_val and y_val"):
        DBKRegressor(**FAST).fit(X, Y, X_val=X)
    with pytest.raises(InputError, match="X_val has 2 features but X has 3"):
        DBKRegressor(**FAST).fit(X, Y, X[:, :2], Y)


@pytest.mark.parametrize("rows", [1, 4])
def test_a_validation_part_of_one_target_value_is_fine(rows):
    """Only the training targets must vary (they are standardised); a small validation part of count data may hold
    one value (uci/challenger's split 6 did), or be one row."""
    model = DBKRegressor(**FAST).fit(X, Y, X[:rows], np.full(rows, 0.5))
    assert np.isfinite(model.predict(X, return_std=True)).all()
    model.recalibrate(X[:rows], np.full(rows, 0.5))  # the same for a calibration part
    assert np.isfinite(model.variance_scale_) and model.variance_scale_ > 0


def test_predict_errors():
    with pytest.raises(NotFittedError, match="not fitted yet"):
        DBKRegressor(**FAST).predict(X)
    model = DBKRegressor(**FAST).fit(X, Y)
    with pytest.raises(InputError, match="X has 2 features, but DBKRegressor is expecting 3 features"):
        model.predict(X[:, :2])
    with pytest.raises(InputError, match="NaN"):
        model.predict(np.full((2, 3), np.nan))


def test_bad_hyperparameters():
    for params, message in [({"inference": "mcmc"}, "inference must be one of 'exact', 'svi', got 'mcmc'"),
                            ({"backbone": "cnn"}, "backbone must be one of"),
                            ({"activation": "swishy"}, "activation must be one of"),
                            ({"rank": 0}, "rank must be an integer >= 1, got 0"), ({"rank": 2.5}, "rank must be"),
                            ({"lr": -1.0}, "lr must be a number > 0"), ({"verbose": "yes"}, "verbose must be True"),
                            ({"max_time": 0}, "max_time must be None or a number > 0"),
                            ({"noise_init": 1e-7}, "must exceed noise_min"),
                            ({"training_gram_precision": "float16"}, "training_gram_precision must be"),
                            ({"inference": "svi", "variational_family": "x"}, "variational_family must be")]:
        model = DBKRegressor(**{**FAST, **params})
        with pytest.raises(ValueError, match=message):
            model.fit(X, Y)
        with pytest.raises(NotFittedError):
            model.predict(X)


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_model_file_errors(tmp_path):
    with pytest.raises(ModelFileError, match="does not exist"):
        neuralgp.load(tmp_path / "missing.pt")
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"\x00garbage" * 10)
    with pytest.raises(ModelFileError, match="not a readable neuralgp model file"):
        neuralgp.load(corrupt)
    evil = tmp_path / "evil.pt"

    class Payload:
        def __reduce__(self):
            return (print, ("this must never run",))
    evil.write_bytes(pickle.dumps({"format": "neuralgp-model", "x": Payload()}))
    with pytest.raises(ModelFileError):
        neuralgp.load(evil)
    import torch
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(3)}, foreign)
    with pytest.raises(ModelFileError, match="not a neuralgp model file"):
        neuralgp.load(foreign)
    older = tmp_path / "older.pt"
    torch.save({"format": "neuralgp-model", "format_version": 1, "class": "DBKRegressor"}, older)
    with pytest.raises(ModelFileError, match="format version 1; this neuralgp reads version 4; re-fit"):
        neuralgp.load(older)


def test_save_errors_leave_no_files(tmp_path):
    model = DBKRegressor(**FAST).fit(X, Y)
    with pytest.raises(ModelFileError, match="does not exist"):
        model.save(tmp_path / "no" / "m.pt")
    with pytest.raises(ModelFileError, match="is a directory"):
        model.save(tmp_path)
    with pytest.raises(NotFittedError):
        DBKRegressor().save(tmp_path / "m.pt")
    assert list(tmp_path.iterdir()) == []


def test_missing_data_set_names_the_alternatives(tmp_path):
    (tmp_path / "uci" / "pol").mkdir(parents=True)
    with pytest.raises(DataError, match="uci set 'kin' not found.*available here: pol"):
        neuralgp.datasets.load("uci/kin", root=tmp_path)

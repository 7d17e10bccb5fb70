"""Data larger than memory: a fitted model's posterior conditioned on rows streamed from disk is the exact GP on
all of them, predictions stream to files, and bad input leaves neither a changed model nor a partial file."""

import numpy as np
import pytest
import torch

from neuralgp import load
from neuralgp.cli import main
from neuralgp.datasets.rows import ArrayRows, CsvRows, NpyRows
from neuralgp.errors import InputError
from neuralgp.models import DAKRegressor, DBKRegressor, FMGPRegressor

SMALL = dict(verbose=False, validation_fraction=0.0)


def _data(n, seed=0, d=3):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, d))
    return X, np.sin(3 * X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.normal(size=n)


@pytest.fixture
def rows(tmp_path):
    X, y = _data(700)
    np.save(tmp_path / "X.npy", X.astype(np.float32))
    np.save(tmp_path / "y.npy", y.astype(np.float32))
    return NpyRows(tmp_path / "X.npy", tmp_path / "y.npy"), X.astype(np.float32).astype(float), \
        y.astype(np.float32).astype(float)


def test_dbk_posterior_on_streamed_rows_is_the_dense_gp_on_all_rows(rows, dense_gp):
    source, X, y = rows
    model = DBKRegressor(rank=8, hidden=16, max_iter=30, variance_correction=False, **SMALL).fit(X[:100], y[:100])
    model.fit_posterior(source, chunk_rows=97)
    assert model.n_posterior_rows_ == 700
    X_test = _data(40, seed=1)[0]
    phi, phi_test = model.features(X), model.features(X_test)  # in y's units: k = φᵀφ'
    mean, var_f, _ = dense_gp(phi @ phi.T, phi @ phi_test.T, (phi_test ** 2).sum(1), y, model.noise_variance_,
                              offset=model.y_scaler_.shift_[0])
    got = model.predict_dist(X_test)
    np.testing.assert_allclose(got["mean"], mean, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["var_f"], var_f, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("make", [
    lambda: DBKRegressor(rank=8, hidden=16, max_iter=20, **SMALL),  # with the variance correction: M_X over all rows
    lambda: FMGPRegressor(hidden=32, feature_dim=8, max_iter=20, **SMALL),
    lambda: DAKRegressor(inference="exact", max_iter=10, hidden=(16,), embedding_dim=8, n_projections=4, **SMALL),
])
def test_streamed_posterior_equals_the_in_memory_one(rows, make):
    source, X, y = rows
    streamed = make().fit(X[:200], y[:200]).fit_posterior(source, chunk_rows=64)
    in_memory = make().fit(X[:200], y[:200])
    Xt = torch.as_tensor(in_memory.x_scaler_.transform(X), dtype=torch.float32)
    yt = torch.as_tensor(in_memory.y_scaler_.transform(y[:, None])[:, 0], dtype=torch.float64)
    in_memory._condition(in_memory._in_memory(Xt, yt))  # the in-memory path fit takes, on all rows
    X_test = _data(30, seed=2)[0]
    for a, b in zip(streamed.predict(X_test, return_std=True), in_memory.predict(X_test, return_std=True)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)
    if isinstance(streamed, DBKRegressor):
        assert streamed.max_prior_variance_ == pytest.approx(in_memory.max_prior_variance_, rel=1e-6)


def test_streamed_rows_need_an_exact_posterior_and_bad_rows_change_nothing(rows, tmp_path):
    source, X, y = rows
    with pytest.raises(InputError, match="cannot condition on streamed rows"):
        DBKRegressor(inference="svi", rank=4, hidden=8, max_epochs=2, **SMALL).fit(X, y).fit_posterior(source)
    model = DBKRegressor(rank=4, hidden=8, max_iter=5, **SMALL).fit(X, y)
    before = model.predict(X[:5], return_std=True)
    with pytest.raises(InputError, match="has no targets|with targets"):
        model.fit_posterior(NpyRows(tmp_path / "X.npy"))
    with pytest.raises(InputError, match="2 features but DBKRegressor was fitted with 3"):
        model.fit_posterior(ArrayRows(X[:, :2], y))
    bad = y.copy()
    bad[650] = np.nan  # found in the last chunk, after the others were read
    with pytest.raises(InputError, match="rows y"):
        model.fit_posterior(ArrayRows(X, bad), chunk_rows=100)
    for a, b in zip(model.predict(X[:5], return_std=True), before):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("model, message", [
    (DBKRegressor(inference="svi", **SMALL), "cannot condition on streamed rows"),
    (DBKRegressor(bagging=2, **SMALL), "bagging=2"),
])
def test_a_streamed_evaluation_refuses_a_model_it_cannot_condition_before_fitting_it(rows, model, message,
                                                                                  monkeypatch):
    from neuralgp.bench.evaluate import evaluate_streaming
    monkeypatch.setattr(DBKRegressor, "fit", lambda *a, **k: pytest.fail("fitted before the check"))
    with pytest.raises(InputError, match=message):
        evaluate_streaming(model, rows[0], train_rows=100, test_rows=50)


def test_predictions_stream_to_npy_and_csv_and_no_partial_file_on_error(rows, tmp_path):
    source, X, y = rows
    model = DBKRegressor(rank=4, hidden=8, max_iter=5, **SMALL).fit(X, y)
    mean, std = model.predict(X, return_std=True)
    out = model.predict_rows(source, tmp_path / "p.npy", chunk_rows=128)
    np.testing.assert_allclose(np.load(out), np.column_stack([mean, std]), rtol=1e-5)
    np.savetxt(tmp_path / "in.csv", X, delimiter=",")
    model.predict_rows(CsvRows(tmp_path / "in.csv", target=None), tmp_path / "p.csv", chunk_rows=300)
    table = np.loadtxt(tmp_path / "p.csv", delimiter=",", skiprows=1)
    np.testing.assert_allclose(table, np.column_stack([mean, std]), rtol=1e-5)
    X_bad = X.copy()
    X_bad[600, 1] = np.inf
    with pytest.raises(InputError, match="infinity|finite"):
        model.predict_rows(ArrayRows(X_bad), tmp_path / "q.npy", chunk_rows=100)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["X.npy", "in.csv", "p.csv", "p.npy", "y.npy"]
    with pytest.raises(InputError, match="must end in .npy or .csv"):
        model.predict_rows(source, tmp_path / "p.txt")


@pytest.mark.cross_fit  # the library's thresholds: a 150-row sample would bag by default, and a bag cannot stream
def test_cli_fits_on_a_sample_streams_the_rest_and_predicts_files(rows, tmp_path, capsys):
    import json
    source, X, y = rows
    assert main(["fit", "--dataset", str(tmp_path / "X.npy"), "--targets", str(tmp_path / "y.npy"), "--model",
                 "dbk", "--train-rows", "150", "--test-rows", "100", "--max-iter", "10", "--json", "--quiet",
                 "--out", str(tmp_path / "run")]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["n_sample"], result["n_posterior_rows"], result["n_test"]) == (150, 600, 100)
    assert result["rmse"] < 0.9
    model = load(tmp_path / "run" / "model.pt")
    assert main(["predict", str(tmp_path / "run" / "model.pt"), str(tmp_path / "X.npy"),
                 "--output", str(tmp_path / "p.npy")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "p.npy")[:, 0], model.predict(X), rtol=1e-5)
    assert main(["fit", "--dataset", str(tmp_path / "X.npy"), "--targets", str(tmp_path / "y.npy"), "--model",
                 "dbk", "--train-rows", "150", "--test-rows", "100", "--max-iter", "10", "--quiet"]) == 0
    printed = capsys.readouterr().out  # the plain report of a streamed fit (it has no best iteration)
    assert "n_posterior_rows: 600" in printed and f"rmse: {result['rmse']:.4f}" in printed
    assert main(["fit", "--dataset", str(tmp_path / "X.npy"), "--model", "dbk"]) == 2
    assert "--targets Y.npy" in capsys.readouterr().err
    assert main(["fit", "--dataset", str(tmp_path / "X.npy"), "--targets", str(tmp_path / "y.npy"),
                 "--model", "svdbk", "--quiet"]) == 2
    assert "cannot condition on streamed rows" in capsys.readouterr().err

"""Data loading, split protocols and the errors for missing data."""

import numpy as np
import pytest

from neuralgp import datasets
from neuralgp.datasets import readers
from neuralgp.errors import DataError


def _disjoint(ds):
    # rows are identified by their full content: no row of the test set is in train
    tr = {tuple(r) for r in np.column_stack([ds.X_train, ds.y_train])}
    return not any(tuple(r) in tr for r in np.column_stack([ds.X_test, ds.y_test]))


def test_uci_random_split_is_seeded_70_10_20():
    a = datasets.load("uci/pol", seed=3)
    b = datasets.load("uci/pol", seed=3)
    c = datasets.load("uci/pol", seed=4)
    assert (len(a.y_train), len(a.y_val), len(a.y_test)) == (700, 100, 200)
    assert a.n_features == 26 and a.task == "regression"
    assert np.array_equal(a.X_train, b.X_train) and not np.array_equal(a.X_train, c.X_train)


@pytest.mark.real_data
def test_real_pol_has_the_papers_size():
    a = datasets.load("uci/pol", seed=3)
    assert (len(a.y_train), len(a.y_val), len(a.y_test)) == (10500, 1500, 3000) and a.n_features == 26


def test_uci_mask_split_uses_the_fixed_masks():
    ds = datasets.load("uci/yacht", split="mask:2", seed=0)
    raw = np.loadtxt(readers.data_root() / "uci/yacht/data.csv.gz", delimiter=",")
    mask = np.loadtxt(readers.data_root() / "uci/yacht/test_mask.csv.gz", delimiter=",")[:, 2].astype(bool)
    assert np.array_equal(ds.X_test, raw[mask, :-1])
    assert len(ds.y_train) + len(ds.y_val) == (~mask).sum() and len(ds.y_val) > 0
    with pytest.raises(DataError, match="masks 0..9"):
        datasets.load("uci/yacht", split="mask:10")


def test_uci_kfold_split_partitions_the_rows_into_five_test_folds():
    tests = [datasets.load("uci/yacht", split=f"kfold:{k}", seed=k) for k in range(5)]
    raw = np.loadtxt(readers.data_root() / "uci/yacht/data.csv.gz", delimiter=",")
    rows = np.concatenate([np.column_stack([ds.X_test, ds.y_test]) for ds in tests])
    assert len(rows) == len(raw) and len({tuple(r) for r in rows}) == len({tuple(r) for r in raw})
    ds = tests[2]
    assert _disjoint(ds) and len(ds.y_train) + len(ds.y_val) + len(ds.y_test) == len(raw) and len(ds.y_val) > 0
    with pytest.raises(DataError, match="folds 0..4"):
        datasets.load("uci/yacht", split="kfold:5")


def test_gal_split_follows_index_files():
    ds = datasets.load("gal/yacht", split="gal:1")
    folder = readers.data_root() / "gal/yacht"
    test_idx = np.loadtxt(folder / "index_test_1.txt", dtype=int)
    data = np.loadtxt(folder / "data.txt")
    assert np.array_equal(ds.y_test, data[test_idx, -1])
    assert len(ds.y_train) + len(ds.y_val) + len(ds.y_test) == len(data) and _disjoint(ds)


@pytest.mark.parametrize("name,n_classes,d", [("uci_classification/magic", 2, 10),
                                              ("uci_classification/letter", 26, 16),
                                              ("uci_classification/htru2", 2, 8), ("digits", 10, 64)])
def test_classification_sets(name, n_classes, d):
    ds = datasets.load(name, seed=0)
    assert ds.task == "classification" and ds.n_features == d
    assert set(np.unique(ds.y_train)) == set(range(n_classes)) and len(ds.classes) == n_classes


def test_step1d_matches_reference_values():
    x = np.array([-1, -0.8, -0.6, -0.3, 0.0, 0.2, 0.4, 0.7, 1.0])
    ref = [0.308788, 0.307157, 0.609862, 0.893018, 0.15, -0.590039, -0.301405, 0.009906, -0.008788]
    np.testing.assert_allclose(datasets.step1d_function(x), ref, atol=1e-6)
    ds = datasets.load("synthetic/step1d", n=300, seed=1)
    assert (len(ds.y_train), len(ds.y_val), len(ds.y_test)) == (300, 30, 1000)
    resid = ds.y_train - datasets.step1d_function(ds.X_train[:, 0])
    assert resid.var() == pytest.approx(0.01, rel=0.25)


def test_user_csv_by_name_and_index(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("a,b,target\n" + "\n".join(f"{i},{i * 2},{i % 7}" for i in range(40)))
    ds = datasets.load(str(path), target="target")
    assert ds.n_features == 2 and set(ds.y_train) <= set(range(7))
    by_index = datasets.load(str(path), target=0)
    assert np.array_equal(np.sort(np.concatenate([by_index.y_train, by_index.y_val, by_index.y_test])),
                          np.arange(40))
    with pytest.raises(DataError, match="no column named 'nope'.*a, b, target"):
        datasets.load(str(path), target="nope")


def test_user_csv_non_numeric_column(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("x,colour,y\n1,red,2\n2,blue,3\n")
    with pytest.raises(DataError, match="colour holds non-numeric values"):
        datasets.load(str(path), target="y")


def test_data_root_resolution(tmp_path, monkeypatch):
    monkeypatch.delenv(readers.ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert readers.data_root() == tmp_path / "cache" / "neuralgp"  # never ../shared, may not exist yet
    with pytest.raises(DataError) as err:
        datasets.load("uci/pol")
    for part in ("uci set 'pol' not found", "neuralgp datasets download uci/pol", readers.ENV_VAR):
        assert part in str(err.value)
    (tmp_path / "uci").mkdir()
    monkeypatch.setenv(readers.ENV_VAR, str(tmp_path))
    assert readers.data_root() == tmp_path and readers.data_root(tmp_path / "uci") == tmp_path / "uci"
    with pytest.raises(DataError, match="uci set 'pol' not found"):
        datasets.load("uci/pol")
    with pytest.raises(DataError, match="not a directory"):
        datasets.load("uci/pol", root=tmp_path / "nowhere")


def test_unknown_names_and_splits():
    with pytest.raises(DataError, match="unknown data set"):
        datasets.load("imagenet")
    with pytest.raises(DataError, match="random, mask:K"):
        datasets.load("uci/yacht", split="gal:0")


def test_available_and_catalogue_list_sizes():
    table = {name: (n, d) for name, n, d in datasets.available()}
    assert table["uci/pol"] == (1000, 26) and table["gal/yacht"] == (160, 6)
    assert table["uci_classification/magic"] == (2400, 10) and table["uci_classification/letter"] == (520, 16)
    listed = {name: (n, d, here) for name, n, d, here in datasets.catalogue()}
    assert listed["uci/protein"] == (45730, 9, False)  # known, downloadable, not here
    assert listed["uci/pol"] == (1000, 26, True) and listed["digits"][2]


@pytest.mark.real_data
def test_real_sets_match_the_shipped_table():
    from neuralgp.datasets import download
    from neuralgp.datasets.download import known_sets
    table = {name: (n, d) for name, n, d in datasets.available()}
    for name, nd in known_sets().items():
        assert table[name] == nd, name
        assert download.is_present(name, readers.data_root()), f"{name} differs from the shipped SHA-256 table"

"""Row sources read the same rows as the arrays they hold, in any chunking, and refuse bad files clearly."""

import gzip

import numpy as np
import pytest

from neuralgp.datasets.rows import ArrayRows, CsvRows, NpyRows
from neuralgp.errors import DataError


def _arrays(n=53, d=3, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)).astype(np.float32), rng.normal(size=n).astype(np.float32)


def _all(source, rows):
    parts = list(source.chunks(rows))
    assert all(len(X) <= rows for X, _ in parts)
    y = None if parts[0][1] is None else np.concatenate([y for _, y in parts])
    return np.concatenate([X for X, _ in parts]), y


@pytest.fixture
def files(tmp_path):
    X, y = _arrays()
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y.reshape(-1, 1))  # (n, 1) targets are accepted too
    table = np.column_stack([X, y]).astype(np.float64)
    lines = ["a,b,c,target"] + [",".join(repr(float(v)) for v in row) for row in table]
    (tmp_path / "d.csv").write_text("\n".join(lines) + "\n\n")  # a trailing blank line is ignored
    with gzip.open(tmp_path / "d.csv.gz", "wt") as fh:
        fh.write("\n".join(lines[1:]) + "\n")  # no header
    return tmp_path, X.astype(np.float64), y.astype(np.float64)


@pytest.mark.parametrize("rows", [1, 7, 53, 1000])
def test_every_source_gives_the_same_rows_in_any_chunking(files, rows):
    folder, X, y = files
    sources = [NpyRows(folder / "X.npy", folder / "y.npy"), CsvRows(folder / "d.csv", target="target"),
               CsvRows(folder / "d.csv.gz"), ArrayRows(X, y)]
    for source in sources:
        assert (source.n_rows, source.n_features, source.has_targets) == (53, 3, True), source
        got_X, got_y = _all(source, rows)
        np.testing.assert_array_equal(got_X, X)
        np.testing.assert_array_equal(got_y, y)
        assert got_X.dtype == np.float64
    features_only = CsvRows(folder / "d.csv", target=None)
    assert features_only.n_features == 4 and _all(features_only, rows)[1] is None


def test_parts_and_samples_read_the_right_rows(files):
    folder, X, y = files
    for source in (NpyRows(folder / "X.npy", folder / "y.npy"), CsvRows(folder / "d.csv")):
        part = source.part(10, 31)
        got_X, got_y = _all(part, 4)
        np.testing.assert_array_equal(got_X, X[10:31])
        np.testing.assert_array_equal(got_y, y[10:31])
        Xs, ys = source.sample(9, seed=3)
        idx = np.sort(np.random.default_rng(3).choice(53, size=9, replace=False))
        np.testing.assert_array_equal(Xs, X[idx])
        np.testing.assert_array_equal(ys, y[idx])
    with pytest.raises(DataError, match="not a non-empty part"):
        ArrayRows(X, y).part(5, 5)
    with pytest.raises(DataError, match="cannot sample 54 rows from 53"):
        ArrayRows(X, y).sample(54)


def test_bad_files_get_errors_that_name_the_fix(tmp_path):
    X, y = _arrays()
    np.save(tmp_path / "F.npy", np.asfortranarray(X))
    with pytest.raises(DataError, match="ascontiguousarray"):
        NpyRows(tmp_path / "F.npy")
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "short.npy", y[:10])
    with pytest.raises(DataError, match="one target per row"):
        NpyRows(tmp_path / "X.npy", tmp_path / "short.npy")
    np.save(tmp_path / "v.npy", y)
    with pytest.raises(DataError, match="2-D"):
        NpyRows(tmp_path / "v.npy")
    np.save(tmp_path / "s.npy", np.array(["a", "b"]).reshape(2, 1))
    with pytest.raises(DataError, match="numeric dtype"):
        NpyRows(tmp_path / "s.npy")
    (tmp_path / "t.txt").write_text("hello\n")
    with pytest.raises(DataError, match="not a .npy file"):
        NpyRows(tmp_path / "t.txt")
    with pytest.raises(DataError, match="does not exist"):
        NpyRows(tmp_path / "missing.npy")
    raw = (tmp_path / "X.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(raw[:-40])
    with pytest.raises(DataError, match="truncated"):
        list(NpyRows(tmp_path / "cut.npy").chunks())
    (tmp_path / "bad.csv").write_text("1,2,3\n4,x,6\n7,8\n")
    with pytest.raises(DataError, match="non-numeric"):
        list(CsvRows(tmp_path / "bad.csv").chunks(2))
    (tmp_path / "ragged.csv").write_text("1,2,3\n4,5,6\n7,8\n")
    with pytest.raises(DataError, match="row 3 has 2 columns"):
        list(CsvRows(tmp_path / "ragged.csv").chunks(2))
    with pytest.raises(DataError, match="no column named 'q'"):
        CsvRows(tmp_path / "bad.csv", target="q")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(DataError, match="empty"):
        CsvRows(tmp_path / "empty.csv")

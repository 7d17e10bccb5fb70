"""Row sources: data read in chunks of rows, never whole — for data larger than memory.

A ``RowSource`` knows its size and yields consecutive (X, y) chunks as float64 arrays; in a process group
``chunks()`` yields only this worker's contiguous shard (``neuralgp.distributed.shard``), so each worker reads its
own rows. Sources: ``NpyRows`` (``.npy`` files read by offset: memory stays flat, nothing is memory-mapped — mapped
pages would count in the process's resident memory), ``CsvRows`` (a CSV file parsed a chunk at a time) and
``ArrayRows`` (arrays already in memory, for the same code path). Models read them through
``fit_posterior(rows)`` and ``predict_rows(rows, out)``.
"""

from __future__ import annotations

import csv
import gzip
import itertools
from pathlib import Path

import numpy as np

from neuralgp import distributed
from neuralgp.chunking import NO_GRAD_ROWS
from neuralgp.datasets.readers import _is_number, _target_index
from neuralgp.errors import DataError


class RowSource:
    """Subclasses set ``n_rows``, ``n_features``, ``has_targets`` and give ``_read(start, stop)`` → (X, y or None)
    or, when they must read sequentially, ``_read_range``."""

    n_rows: int
    n_features: int
    has_targets: bool

    def _read_range(self, start: int, stop: int, rows: int):
        """Consecutive chunks of [start, stop); sources that must read sequentially (CSV) override it."""
        for a in range(start, stop, rows):
            yield self._read(a, min(a + rows, stop))

    def chunks(self, rows: int | None = None, shard: bool = True):
        """(X, y) chunks of at most ``rows`` rows (y None without targets) over this worker's shard of the rows
        (all rows outside a process group, or with ``shard=False``)."""
        part = distributed.shard(self.n_rows) if shard else slice(0, self.n_rows)
        yield from self._read_range(part.start, part.stop, int(rows or NO_GRAD_ROWS))

    def sample(self, m: int, seed: int = 0, shard: bool = False):
        """(X, y) of ``m`` rows drawn without replacement (in file order), read in one pass: a training set for the
        feature map of a model whose posterior then sees every row (``fit_posterior``). With ``shard`` the rows
        come from this worker's shard only (drawn with seed (seed, rank) in a process group)."""
        rank, size = distributed.world()
        part = distributed.shard(self.n_rows) if shard else slice(0, self.n_rows)
        n = part.stop - part.start
        if not 1 <= m <= n:
            raise DataError(f"cannot sample {m} rows from {n}")
        rng = np.random.default_rng([seed, rank] if shard and size > 1 else seed)
        picks = np.sort(rng.choice(n, size=m, replace=False))
        X, y, start = [], [], 0
        for Xc, yc in self.chunks(shard=shard):
            stop = start + len(Xc)
            local = picks[np.searchsorted(picks, start):np.searchsorted(picks, stop)] - start
            X.append(Xc[local])
            y.append(None if yc is None else yc[local])
            start = stop
        return np.concatenate(X), (None if y[0] is None else np.concatenate(y))

    def part(self, start: int, stop: int) -> "RowSource":
        """Rows [start, stop) of this source, read from it (a training or test part without a copy)."""
        if not 0 <= start < stop <= self.n_rows:
            raise DataError(f"rows [{start}, {stop}) are not a non-empty part of a source of {self.n_rows} rows")
        return RowRange(self, start, stop)

    def __len__(self):
        return self.n_rows

    def __repr__(self):
        return f"{type(self).__name__}(n_rows={self.n_rows}, n_features={self.n_features})"


class RowRange(RowSource):
    """Rows [start, stop) of another source (``RowSource.part``)."""

    def __init__(self, source: RowSource, start: int, stop: int):
        self.source, self.start = source, start
        self.n_rows, self.n_features, self.has_targets = stop - start, source.n_features, source.has_targets

    def _read_range(self, start, stop, rows):
        yield from self.source._read_range(self.start + start, self.start + stop, rows)


class ArrayRows(RowSource):
    """Arrays in memory as a row source (X of shape (n, d), optional y of length n)."""

    def __init__(self, X, y=None):
        self.X = np.asarray(X)
        self.y = None if y is None else np.asarray(y).reshape(-1)
        if self.X.ndim != 2:
            raise DataError(f"X must be 2-D (n_rows, n_features), got shape {self.X.shape}")
        if self.y is not None and len(self.y) != len(self.X):
            raise DataError(f"X has {len(self.X)} rows but y has {len(self.y)}")
        self.n_rows, self.n_features, self.has_targets = self.X.shape[0], self.X.shape[1], self.y is not None

    def _read(self, start, stop):
        y = None if self.y is None else self.y[start:stop].astype(np.float64)
        return self.X[start:stop].astype(np.float64), y


def _npy_header(path: Path):
    """(shape, dtype, data offset) of a ``.npy`` file, with the errors a user can act on."""
    if not path.is_file():
        raise DataError(f"{path} does not exist")
    with open(path, "rb") as fh:
        try:
            version = np.lib.format.read_magic(fh)
            read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
            shape, fortran, dtype = read.get(version, np.lib.format.read_array_header_2_0)(fh)
        except ValueError as exc:
            raise DataError(f"{path} is not a .npy file ({exc}); save arrays with numpy.save") from None
        offset = fh.tell()
    if fortran and len(shape) > 1:
        raise DataError(f"{path} is stored column-major (Fortran order); rows must be contiguous: "
                        "save numpy.ascontiguousarray(X) instead")
    if dtype.kind not in "fiub" or dtype.hasobject:
        raise DataError(f"{path} holds {dtype}; a numeric dtype (float32, float64, int) is needed")
    return shape, dtype, offset


class NpyRows(RowSource):
    """``.npy`` files: ``X_path`` of shape (n, d) and, optionally, ``y_path`` of shape (n,) or (n, 1); any numeric
    dtype (float32 halves the disk). Chunks are read at their byte offsets: memory stays O(chunk) whatever n is."""

    def __init__(self, X_path, y_path=None):
        self.X_path, self.y_path = Path(X_path), None if y_path is None else Path(y_path)
        shape, self._x_dtype, self._x_offset = _npy_header(self.X_path)
        if len(shape) != 2 or min(shape) < 1:
            raise DataError(f"{self.X_path} must hold a 2-D array (n_rows, n_features), got shape {shape}")
        self.n_rows, self.n_features = shape
        self.has_targets = self.y_path is not None
        if self.has_targets:
            y_shape, self._y_dtype, self._y_offset = _npy_header(self.y_path)
            if y_shape not in ((self.n_rows,), (self.n_rows, 1)):
                raise DataError(f"{self.y_path} has shape {y_shape}; it needs one target per row of "
                                f"{self.X_path} ({self.n_rows},)")

    @staticmethod
    def _block(path, dtype, offset, width, start, stop) -> np.ndarray:
        with open(path, "rb") as fh:
            fh.seek(offset + start * width * dtype.itemsize)
            block = np.fromfile(fh, dtype=dtype, count=(stop - start) * width)
        if len(block) != (stop - start) * width:
            raise DataError(f"{path} is shorter than its header says (truncated file?)")
        return block.reshape(stop - start, width).astype(np.float64)

    def _read(self, start, stop):
        X = self._block(self.X_path, self._x_dtype, self._x_offset, self.n_features, start, stop)
        y = None
        if self.has_targets:
            y = self._block(self.y_path, self._y_dtype, self._y_offset, 1, start, stop)[:, 0]
        return X, y


class CsvRows(RowSource):
    """A CSV file (optionally gzipped; a header line is recognised by a non-numeric value) parsed a chunk at a time.
    ``target``: the target column's name or index (default the last), or None when every column is a feature
    (prediction). Counting the rows takes one pass over the file; a worker skips the lines before its shard
    without parsing them. ``.npy`` files are much faster to read."""

    def __init__(self, path, target=-1):
        self.path = Path(path)
        if not self.path.is_file():
            raise DataError(f"CSV file {self.path} does not exist")
        with self._open() as fh:
            first = next((r for r in csv.reader(fh) if r), None)
            if first is None:
                raise DataError(f"CSV file {self.path} is empty")
            self._header = [h.strip() for h in first] if any(not _is_number(v) for v in first) else None
            self.n_rows = sum(1 for line in fh if line.strip()) + (self._header is None)
        width = len(first)
        self._target = None if target is None else _target_index(target, self._header, width, self.path)
        self.n_features, self.has_targets = width - (self._target is not None), self._target is not None
        if self.n_features < 1:
            raise DataError(f"{self.path}: no feature columns")

    def _open(self):
        opener = gzip.open if self.path.suffix == ".gz" else open
        try:
            return opener(self.path, "rt", newline="")
        except OSError as exc:
            raise DataError(f"cannot read {self.path}: {exc}") from None

    def _parse(self, lines: list, first_line: int):
        width = self.n_features + self.has_targets
        rows = list(csv.reader(lines))
        bad = next((i for i, r in enumerate(rows) if len(r) != width), None)
        if bad is not None:
            raise DataError(f"{self.path}: row {first_line + bad + 1} has {len(rows[bad])} columns, not {width}")
        try:
            table = np.array(rows, dtype=np.float64)
        except ValueError:
            raise DataError(f"{self.path}: non-numeric values between rows {first_line + 1} and "
                            f"{first_line + len(rows)}; every column must be a number") from None
        if self._target is None:
            return table, None
        return np.delete(table, self._target, axis=1), table[:, self._target]

    def _read_range(self, start, stop, rows):
        with self._open() as fh:
            lines = (line for line in fh if line.strip())
            if self._header is not None:
                next(lines)
            lines = itertools.islice(lines, start, stop)
            for a in range(start, stop, rows):
                yield self._parse(list(itertools.islice(lines, rows)), a)

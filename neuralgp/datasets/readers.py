"""Readers for the on-disk formats: uci/, gal/, uci_classification/ and user CSV files."""

from __future__ import annotations

import csv
import gzip
import os
from pathlib import Path

import numpy as np

from neuralgp.errors import DataError

ENV_VAR = "NEURALGP_DATA"

CLASSIFICATION_FILES = {  # file (gzipped UCI original; a header line is optional), label column
    "magic": ("magic04.data.gz", -1),
    "letter": ("letter-recognition.data.gz", 0),
    "htru2": ("HTRU_2.csv.gz", -1),
}


def default_data_home() -> Path:
    """The per-user data folder: $XDG_CACHE_HOME/neuralgp, else ~/.cache/neuralgp."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "neuralgp"


def data_root(root=None) -> Path:
    """Explicit ``root``, else $NEURALGP_DATA, else ``default_data_home()`` (which need not exist yet)."""
    for label, path in (("the root argument", root), (f"${ENV_VAR}", os.environ.get(ENV_VAR))):
        if path:
            path = Path(path).expanduser()
            if not path.is_dir():
                raise DataError(f"data root {path} (from {label}) is not a directory; create it, or fetch data "
                                f"into it with `neuralgp datasets download NAME --root {path}`")
            return path
    return default_data_home()


def _open_text(path: Path):
    return gzip.open(path, "rt") if path.suffix == ".gz" else open(path, newline="")


def _require(path: Path, what: str, folder: Path) -> Path:
    if not path.exists():
        have = sorted(p.name for p in folder.parent.iterdir()) if folder.parent.is_dir() else []
        name = f"{folder.parent.name}/{folder.name}"
        root = folder.parent.parent
        raise DataError(f"{what} not found at {path}; available here: {', '.join(have) or 'nothing'}. "
                        f"Fetch it with `neuralgp datasets download {name} --root {root}`, or point "
                        f"${ENV_VAR} (--data-root) at a folder that has it")
    return path


def read_uci(root: Path, name: str):
    """uci/<name>/data.csv.gz (last column = target) and its 10 test masks."""
    folder = root / "uci" / name
    data = np.loadtxt(_require(folder / "data.csv.gz", f"uci set {name!r}", folder), delimiter=",", ndmin=2)
    masks = np.loadtxt(_require(folder / "test_mask.csv.gz", f"test masks of {name!r}", folder),
                       delimiter=",", ndmin=2).astype(bool)
    return data[:, :-1], data[:, -1], masks


def read_gal(root: Path, name: str, k: int | None):
    """gal/<name>/data.txt with its feature/target index files and, for k, split k's indices."""
    folder = root / "gal" / name
    data = np.loadtxt(_require(folder / "data.txt", f"gal set {name!r}", folder), ndmin=2)
    feat = np.loadtxt(folder / "index_features.txt", dtype=int, ndmin=1)
    target = int(np.loadtxt(folder / "index_target.txt", dtype=int))
    X, y = data[:, feat], data[:, target]
    if k is None:
        return X, y, None, None
    n_splits = int(np.loadtxt(folder / "n_splits.txt"))
    if not 0 <= k < n_splits:
        raise DataError(f"gal set {name!r} has splits 0..{n_splits - 1}, not {k}")
    train = np.loadtxt(folder / f"index_train_{k}.txt", dtype=int, ndmin=1)
    test = np.loadtxt(folder / f"index_test_{k}.txt", dtype=int, ndmin=1)
    return X, y, train, test


def read_uci_classification(root: Path, name: str):
    """uci_classification/<name>: inputs and integer class labels (0..C−1) plus the class names."""
    if name not in CLASSIFICATION_FILES:
        raise DataError(f"unknown classification set {name!r}; available: {', '.join(CLASSIFICATION_FILES)}")
    fname, label_col = CLASSIFICATION_FILES[name]
    folder = root / "uci_classification" / name
    with _open_text(_require(folder / fname, f"classification set {name!r}", folder)) as fh:
        rows = [r for r in csv.reader(fh) if r]
    if rows and _is_header(rows, label_col):
        rows = rows[1:]
    labels = np.array([r[label_col] for r in rows])
    X = np.array([[float(v) for i, v in enumerate(r) if i != label_col % len(r)] for r in rows])
    classes, y = np.unique(labels, return_inverse=True)
    return X, y.astype(np.int64), classes


def read_csv(path, target=-1):
    """A user CSV file (optionally gzipped) with or without a header; ``target`` is a column name or index."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"CSV file {path} does not exist")
    try:
        with _open_text(path) as fh:
            rows = [r for r in csv.reader(fh) if r]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"cannot read {path} as CSV: {exc}") from None
    if not rows:
        raise DataError(f"CSV file {path} is empty")
    header = None
    if any(not _is_number(v) for v in rows[0]):
        header, rows = [h.strip() for h in rows[0]], rows[1:]
    width = len(rows[0]) if rows else 0
    if width < 2 or any(len(r) != width for r in rows):
        raise DataError(f"{path}: every row needs the same number (>= 2) of comma-separated columns")
    col = _target_index(target, header, width, path)
    table = np.empty((len(rows), width))
    for j in range(width):
        name = header[j] if header else f"column {j}"
        try:
            table[:, j] = [float(r[j]) for r in rows]
        except ValueError:
            raise DataError(f"{path}: {name} holds non-numeric values; encode it as numbers or drop it") from None
    X = np.delete(table, col, axis=1)
    names = [h for j, h in enumerate(header) if j != col] if header else None
    return X, table[:, col], names


def _is_header(rows: list, label_col: int) -> bool:
    """The UCI originals have no header line; copies that add one (letter's "Letter,1,2,…") are recognised by
    a non-numeric input value or a label that no other row has."""
    first, col = rows[0], label_col % len(rows[0])
    return (not all(_is_number(v) for i, v in enumerate(first) if i != col)
            or all(r[col] != first[col] for r in rows[1:]))


def _is_number(v: str) -> bool:
    try:
        float(v)
        return True
    except ValueError:
        return False


def _target_index(target, header, width, path) -> int:
    if isinstance(target, str) and not target.lstrip("-").isdigit():
        if header is None or target not in header:
            raise DataError(f"{path}: no column named {target!r}"
                            + (f"; columns are {', '.join(header)}" if header else " (the file has no header)"))
        return header.index(target)
    idx = int(target)
    if not -width <= idx < width:
        raise DataError(f"{path}: target column {idx} is out of range for {width} columns")
    return idx % width


def describe(root: Path) -> list[tuple[str, int, int]]:
    """(name, n, d) for every data set under the root, read from the files."""
    out = []
    if not root.is_dir():
        return out
    for folder in sorted((root / "uci").glob("*/data.csv.gz")):
        with gzip.open(folder, "rt") as fh:
            first = fh.readline()
            n = 1 + sum(1 for _ in fh)
        out.append((f"uci/{folder.parent.name}", n, first.count(",")))
    for folder in sorted((root / "gal").glob("*/data.txt")):
        n = sum(1 for line in open(folder) if line.strip())
        d = len(np.loadtxt(folder.parent / "index_features.txt", ndmin=1))
        out.append((f"gal/{folder.parent.name}", n, d))
    for name in CLASSIFICATION_FILES:
        if (root / "uci_classification" / name / CLASSIFICATION_FILES[name][0]).exists():
            X, _, _ = read_uci_classification(root, name)
            out.append((f"uci_classification/{name}", *X.shape))
    return out

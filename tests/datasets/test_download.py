"""`neuralgp datasets download` against a local HTTP server on 127.0.0.1 serving a small mirror tree."""

import functools
import gzip
import hashlib
import http.server
import json
import threading
import zipfile

import pytest

from neuralgp.cli import main
from neuralgp.datasets import download
from neuralgp.errors import DataError


class _Handler(http.server.SimpleHTTPRequestHandler):
    fail: set = set()  # URL paths answered with HTTP 500
    truncate: set = set()  # URL paths whose transfer stops after 10 bytes

    def do_GET(self):
        if self.path in self.fail:
            return self.send_error(500, "mirror broken")
        if self.path in self.truncate:
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            self.wfile.write(b"0123456789")
            self.wfile.flush()
            self.close_connection = True
            return None
        return super().do_GET()

    def log_message(self, *args):
        pass


@pytest.fixture
def mirror(tmp_path, toy_data_root, monkeypatch):
    """A mirror of uci/yacht, gal/yacht and magic laid out like the public sources, its checksum table, a server."""
    tree = tmp_path / "mirror"
    files, sets = {}, {}
    for family, name in (("uci", "yacht"), ("gal", "yacht")):
        pattern = download.SOURCES[family][1]
        for path in sorted((toy_data_root / family / name).iterdir()):
            dest = tree / pattern.format(set=name, file=path.name)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(path.read_bytes())
            files[f"{family}/{name}/{path.name}"] = [hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_size]
        sets[f"{family}/{name}"] = [308, 6]
    archive = tree / download.CLASSIFICATION_SOURCES["magic"][0]
    archive.parent.mkdir(parents=True)
    with zipfile.ZipFile(archive, "w") as zf:  # the UCI zip holds the plain original
        zf.writestr("magic04.data", gzip.decompress((toy_data_root / "uci_classification/magic/magic04.data.gz")
                                                    .read_bytes()))
    monkeypatch.setattr(download, "manifest", lambda: {"sets": sets, "files": files})
    monkeypatch.setitem(download.CLASSIFICATION_SOURCES, "magic",
                        (*download.CLASSIFICATION_SOURCES["magic"][:2], 2400, 10, 2))
    _Handler.fail, _Handler.truncate = set(), set()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Handler, directory=str(tree)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield tree, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_download_verify_skip_and_fit(tmp_path, mirror, capsys):
    _, url = mirror
    root = tmp_path / "data"
    assert main(["datasets", "download", "uci/yacht", "gal/yacht", "uci_classification/magic", "--root", str(root),
                 "--mirror", url, "--quiet"]) == 0
    assert "uci/yacht: downloaded and verified" in capsys.readouterr().out
    assert sorted(p.name for p in (root / "uci" / "yacht").iterdir()) == ["data.csv.gz", "test_mask.csv.gz"]
    assert not list(root.glob(".neuralgp-download-*"))
    assert main(["fit", "--dataset", "uci/yacht", "--data-root", str(root), "--max-iter", "20", "--rank", "8",
                 "--json", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["n_train"] == 216
    assert main(["fit", "--dataset", "uci_classification/magic", "--data-root", str(root), "--model", "fmgp",
                 "--max-iter", "5", "--rank", "8", "--json", "--quiet"]) == 0
    capsys.readouterr()
    assert download.download(["uci/yacht"], root=root, mirror=url, verbose=False) == {"uci/yacht": "present"}


def test_force_downloads_again_and_repairs(tmp_path, mirror):
    _, url = mirror
    root = tmp_path / "data"
    download.download(["uci/yacht"], root=root, mirror=url, verbose=False)
    (root / "uci/yacht/data.csv.gz").write_bytes(b"damaged")
    assert download.download(["uci/yacht"], root=root, mirror=url, verbose=False) == {"uci/yacht": "downloaded"}
    assert download.is_present("uci/yacht", root)
    assert download.download(["uci/yacht"], root=root, mirror=url, force=True, verbose=False) == {
        "uci/yacht": "downloaded"}


@pytest.mark.parametrize("damage,message", [
    ("corrupt", "does not match neuralgp's checksum"),
    ("server_error", "HTTP 500"),
    ("truncate", "transfer interrupted"),
    ("missing", "HTTP 404"),
])
def test_failures_say_what_and_leave_nothing(tmp_path, mirror, damage, message):
    tree, url = mirror
    path = "/uci_datasets/yacht/test_mask.csv.gz"
    if damage == "corrupt":
        (tree / path.lstrip("/")).write_bytes(b"not the public file")
    elif damage == "server_error":
        _Handler.fail.add(path)
    elif damage == "truncate":
        _Handler.truncate.add(path)
    else:
        (tree / path.lstrip("/")).unlink()
    root = tmp_path / "data"
    with pytest.raises(DataError, match=message) as err:
        download.download(["uci/yacht"], root=root, mirror=url, verbose=False)
    assert url + path in str(err.value) and "place it by hand" in str(err.value)
    assert not root.exists()  # the root it created is removed again: no partial files, no folder
    existing = tmp_path / "existing"
    existing.mkdir()
    with pytest.raises(DataError):
        download.download(["uci/yacht"], root=existing, mirror=url, verbose=False)
    assert list(existing.iterdir()) == []


def test_classification_parsed_check_and_bad_names(tmp_path, mirror, monkeypatch):
    _, url = mirror
    monkeypatch.setitem(download.CLASSIFICATION_SOURCES, "magic",
                        (*download.CLASSIFICATION_SOURCES["magic"][:2], 19020, 10, 2))
    with pytest.raises(DataError, match="has 2400 rows, 10 inputs and 2 classes; expected 19020"):
        download.download(["uci_classification/magic"], root=tmp_path / "d", mirror=url, verbose=False)
    assert not (tmp_path / "d").exists()
    with pytest.raises(DataError, match="unknown data set.*uci/nope"):
        download.download(["uci/nope"], root=tmp_path / "d", verbose=False)
    assert main(["datasets", "download", "--root", str(tmp_path / "d")]) == 2


def test_shipped_table_covers_every_set():
    table = download.manifest()
    assert len(table["sets"]) == 33 and all(any(f.startswith(s + "/") for f in table["files"]) for s in table["sets"])
    assert all(len(sha) == 64 and size > 0 for sha, size in table["files"].values())

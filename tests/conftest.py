"""Shared test set-up: a data root of small generated sets in every on-disk format, and the real-data marker.

Every test runs with ``$NEURALGP_DATA`` pointing at the generated root (named like the real sets the suites
and CLI use, with their widths, but small and synthetic), except tests marked ``real_data``: those need the
real benchmark files, run when ``$NEURALGP_DATA`` is set (CI sets it), and skip otherwise.
"""

import gzip
import os
import string

import numpy as np
import pytest
import torch

REAL_DATA_ROOT = os.environ.get("NEURALGP_DATA")
HOW_TO_GET_DATA = ("needs the real benchmark data: `neuralgp datasets download --all --root DIR`, "
                   "then NEURALGP_DATA=DIR")


def pytest_configure(config):
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:  # pytest-xdist: each worker (and the CLI processes it starts) gets its share of the cores
        threads = max(1, (os.cpu_count() or 1) // workers)
        torch.set_num_threads(threads)
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    config.addinivalue_line("markers", f"real_data: {HOW_TO_GET_DATA}")
    config.addinivalue_line("markers", "cross_fit: runs the library's cross-fitted recalibration of small "
                                       "validation parts (other tests recalibrate on the validation part alone)")


def _regression(rng, n, d):
    X = rng.uniform(-1, 1, size=(n, d))
    return X, np.sin(3 * X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.normal(size=n)


def _write_uci(root, name, n, d, rng):
    folder = root / "uci" / name
    folder.mkdir(parents=True)
    X, y = _regression(rng, n, d)
    np.savetxt(folder / "data.csv.gz", np.column_stack([X, y]), delimiter=",")
    masks = np.zeros((n, 10), dtype=int)
    for k in range(10):
        masks[rng.permutation(n)[: n // 10], k] = 1
    np.savetxt(folder / "test_mask.csv.gz", masks, delimiter=",", fmt="%d")


def _write_gal(root, name, n, d, n_splits, rng):
    folder = root / "gal" / name
    folder.mkdir(parents=True)
    X, y = _regression(rng, n, d)
    np.savetxt(folder / "data.txt", np.column_stack([X, y]))
    np.savetxt(folder / "index_features.txt", np.arange(d), fmt="%d")
    (folder / "index_target.txt").write_text(f"{d}\n")
    (folder / "n_splits.txt").write_text(f"{n_splits}\n")
    for k in range(n_splits):
        perm = rng.permutation(n)
        np.savetxt(folder / f"index_train_{k}.txt", perm[n // 10:], fmt="%d")
        np.savetxt(folder / f"index_test_{k}.txt", perm[: n // 10], fmt="%d")


def _write_classification(root, name, fname, n, d, labels, label_first, header, rng):
    folder = root / "uci_classification" / name
    folder.mkdir(parents=True)
    X = rng.normal(size=(n, d))
    y = np.asarray(labels)[np.argmax(X @ rng.normal(size=(d, len(labels))), axis=1)]  # a linear classifier's labels
    y[: len(labels)] = labels  # every class present
    rows = [[lab, *map(repr, x)] if label_first else [*map(repr, x), lab] for x, lab in zip(X.tolist(), y)]
    lines = ([",".join(header)] if header else []) + [",".join(r) for r in rows]
    with gzip.open(folder / fname, "wt") as fh:
        fh.write("\n".join(lines) + "\n")


@pytest.fixture(scope="session")
def toy_data_root(tmp_path_factory):
    """uci/{yacht, pol, parkinsons}, gal/yacht and the three classification sets, small and generated: the
    UCI originals' formats for magic (no header), copies' headers for letter and htru2."""
    root = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(0)
    for name, n, d in (("yacht", 308, 6), ("pol", 1000, 26), ("parkinsons", 2400, 20)):
        _write_uci(root, name, n, d, rng)
    _write_gal(root, "yacht", 160, 6, 3, rng)  # smaller than the real 308 rows: DKM costs P³
    _write_classification(root, "magic", "magic04.data.gz", 2400, 10, ["g", "h"], False, None, rng)
    _write_classification(root, "letter", "letter-recognition.data.gz", 520, 16, list(string.ascii_uppercase),
                          True, ["Letter", *map(str, range(1, 17))], rng)
    _write_classification(root, "htru2", "HTRU_2.csv.gz", 300, 8, ["0", "1"], False,
                          [f'"f{i}"' for i in range(8)] + ['"class"'], rng)
    return root


@pytest.fixture(autouse=True)
def validation_recalibration(request, monkeypatch):
    """Tests recalibrate small validation parts on the validation part alone: the cross-fitted α (5 more fits per
    fit) would make every small DBK/DAK fit of the suite several times slower (scikit-learn's estimator checks
    alone: 17 min for the whole suite with them cross-fitting, 2026-11-25). Tests marked ``cross_fit`` — those of
    the cross-fitted α — run the library's default."""
    if request.node.get_closest_marker("cross_fit") is None:
        import neuralgp.models.base
        monkeypatch.setattr(neuralgp.models.base, "CROSS_FIT_BELOW", 0)


@pytest.fixture(autouse=True)
def data_root(request, monkeypatch, toy_data_root):
    """The data root a test sees: the real one for ``real_data`` tests (skipped without it), else the toy one."""
    if request.node.get_closest_marker("real_data"):
        if not REAL_DATA_ROOT:
            pytest.skip(HOW_TO_GET_DATA)
        return REAL_DATA_ROOT
    monkeypatch.setenv("NEURALGP_DATA", str(toy_data_root))
    return toy_data_root


def dense_gp_posterior(K, K_star, prior_star, y, noise, offset=0.0):
    """The textbook GP every low-rank posterior is checked against: K (n × n, noise-free) training covariance,
    K_star (n × m) cross-covariances, prior_star (m,) test prior variances, noise σ², prior mean ``offset``.
    Returns (mean, var_f, S = K + σ²I); NumPy arrays or torch tensors alike."""
    lib, solve = (torch, torch.linalg.solve) if isinstance(K, torch.Tensor) else (np, np.linalg.solve)
    S = K + noise * lib.eye(len(y), dtype=K.dtype)
    mean = offset + K_star.T @ solve(S, y - offset)
    return mean, prior_star - (K_star * solve(S, K_star)).sum(0), S


@pytest.fixture
def dense_gp():
    """The dense-GP reference (``dense_gp_posterior``) for tests that prove a posterior equals it."""
    return dense_gp_posterior

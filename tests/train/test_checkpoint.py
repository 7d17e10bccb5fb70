"""A killed fit resumed from its checkpoint ends where an uninterrupted fit ends; checkpoints of other fits are
refused."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import neuralgp.models.dak as dak_module
import neuralgp.train.loop as loop
from neuralgp import load
from neuralgp.errors import CheckpointError
from neuralgp.models import DAKRegressor, DBKRegressor, DKLRegressor, FMGPRegressor, SVGPRegressor


class Killed(Exception):
    pass


def _data(n=300, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, 2))
    return X, np.sin(3 * X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.normal(size=n)


def _kill_after(monkeypatch, step):
    save = loop.Checkpoint.save

    def save_then_die(self, module, best, log, i, elapsed):
        save(self, module, best, log, i, elapsed)
        if i >= step:
            raise Killed
    monkeypatch.setattr(loop.Checkpoint, "save", save_then_die)


@pytest.mark.parametrize("make, every, kill_at", [
    (lambda **kw: DBKRegressor(rank=8, hidden=16, max_iter=60, eval_every=5, verbose=False, **kw), 20, 40),
    (lambda **kw: DBKRegressor(rank=8, hidden=16, inference="svi", max_epochs=12, eval_every=3, verbose=False,
                               **kw), 4, 8),
    (lambda **kw: DAKRegressor(inference="mc", hidden=(8,), embedding_dim=4, n_projections=2, max_epochs=9,
                               eval_every=3, verbose=False, **kw), 3, 6),
    (lambda **kw: FMGPRegressor(feature_dim=4, hidden=16, max_iter=12, verbose=False, **kw), 4, 8),
    (lambda **kw: SVGPRegressor(num_inducing=8, max_epochs=6, eval_every=2, verbose=False, **kw), 2, 4),
    (lambda **kw: DKLRegressor(hidden=8, max_iter=9, eval_every=3, verbose=False, **kw), 3, 6),
])
def test_a_killed_fit_resumed_ends_where_an_uninterrupted_fit_ends(tmp_path, monkeypatch, make, every, kill_at):
    X, y = _data()
    reference = make().fit(X, y)
    path = tmp_path / "fit.ckpt"
    with monkeypatch.context() as m:
        _kill_after(m, kill_at)
        with pytest.raises(Killed):
            make(checkpoint=path, checkpoint_every=every).fit(X, y)
    assert path.exists()
    resumed = make(checkpoint=path, checkpoint_every=every).fit(X, y)
    assert not path.exists()  # a finished fit leaves no checkpoint
    assert (resumed.n_iter_, resumed.train_log_.best_step) == (reference.n_iter_, reference.train_log_.best_step)
    for a, b in zip(resumed.predict(X, return_std=True), reference.predict(X, return_std=True)):
        np.testing.assert_array_equal(a, b)
    loaded = load(resumed.save(tmp_path / "model.pt"))  # a model with checkpoint=Path(...) saves and loads
    np.testing.assert_array_equal(loaded.predict(X), resumed.predict(X))


def test_dak_killed_while_comparing_inferences_resumes_each_candidate_from_its_own_file(tmp_path, monkeypatch):
    monkeypatch.setattr(dak_module, "EXACT_MAX_ROWS", 100)  # 270 training rows: "auto" fits both and compares

    def make(**kw):
        return DAKRegressor(hidden=(8,), embedding_dim=4, n_projections=2, max_epochs=9, max_iter=30, eval_every=3,
                            verbose=False, **kw)
    X, y = _data()
    reference = make().fit(X, y)
    path = tmp_path / "fit.ckpt"
    with monkeypatch.context() as m:
        _kill_after(m, 20)  # the closed form's 9 epochs finish; the exact fit (30 steps) is killed at step 21
        with pytest.raises(Killed):
            make(checkpoint=path, checkpoint_every=3).fit(X, y)
    assert [p.name for p in tmp_path.iterdir()] == ["fit.ckpt.exact"]
    resumed = make(checkpoint=path, checkpoint_every=3).fit(X, y)
    assert not any(tmp_path.iterdir())
    assert (resumed.inference_, resumed.inference_scores_) == (reference.inference_, reference.inference_scores_)
    np.testing.assert_array_equal(resumed.predict(X), reference.predict(X))


def test_a_checkpoint_of_another_fit_is_refused(tmp_path, monkeypatch):
    X, y = _data()
    path = tmp_path / "fit.ckpt"
    kw = dict(rank=4, hidden=8, max_iter=20, verbose=False, checkpoint=path, checkpoint_every=5)
    with monkeypatch.context() as m:
        _kill_after(m, 5)
        with pytest.raises(Killed):
            DBKRegressor(**kw).fit(X, y)
    with pytest.raises(CheckpointError, match="another fit"):
        DBKRegressor(**{**kw, "lr": 0.01}).fit(X, y)
    with pytest.raises(CheckpointError, match="another fit"):
        DBKRegressor(**kw).fit(X, y + 1.0)
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="cannot read"):
        DBKRegressor(**kw).fit(X, y)


def _cli(*args, wait=True):
    cmd = [sys.executable, "-m", "neuralgp", "fit", "--dataset", "synthetic/step1d", "--n", "1200", "--model", "dbk",
           "--max-iter", "60", "--rank", "16", "--json", "--quiet", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if not wait:
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)


def test_cli_resume_after_sigkill_gives_the_uninterrupted_result(tmp_path):
    path = tmp_path / "fit.ckpt"
    job = _cli("--checkpoint", str(path), "--checkpoint-every", "20", wait=False)
    deadline = time.monotonic() + 120
    while not path.exists() and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.exists(), "no checkpoint was written"
    job.send_signal(signal.SIGKILL)
    job.wait()
    refused = _cli("--checkpoint", str(path))
    assert refused.returncode == 2 and "add --resume" in refused.stderr
    resumed = _cli("--checkpoint", str(path), "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert not path.exists()
    uninterrupted = _cli()
    got, want = json.loads(resumed.stdout), json.loads(uninterrupted.stdout)
    for key in ("rmse", "nll", "coverage_95", "iterations", "best_iteration"):
        assert got[key] == want[key], key

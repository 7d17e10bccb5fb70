"""``streaming``: data larger than memory (issue 18). Synthetic rows are written to ``.npy`` files in a scratch
folder; then, as a user would, ``neuralgp fit --dataset X.npy --targets y.npy`` (the feature map trained on a
sample, the exact posterior conditioned on every other row read from disk in chunks) and ``neuralgp predict``
(every row, written to a ``.npy``) run as child processes, each timed with its own peak resident memory
(``os.wait4``). Flat memory shows as the same peak at 10⁶, 10⁷ and 10⁸ rows. A timing, not a table: ``run``
writes ``OUT/streaming.json``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from neuralgp.bench.runner import write_timing

D = 8
BLOCK = 1_000_000
# what each model row runs: DBK at its defaults; FM-GP with a 128-wide network (its default 512 costs 16× the
# flops per row: about 2 hours for 10⁸ rows on 2 cores), both trained briefly on the sample
MODELS = {"dbk": ["--max-iter", "300"], "fmgp": ["--param", "hidden=128", "--max-iter", "200"]}


def write_rows(folder: Path, n: int, seed: int = 0) -> tuple[Path, Path]:
    """X (n, D) float32 uniform in [-1, 1] and y = sin(3x₁) + x₂² + x₃x₄ + 0.1ε (float32), written a block at a
    time; the first rows of a larger file are the rows of a smaller one."""
    x_path, y_path = folder / f"X_{n}.npy", folder / f"y_{n}.npy"
    with open(x_path, "wb") as fx, open(y_path, "wb") as fy:
        np.lib.format.write_array_header_2_0(fx, {"descr": "<f4", "fortran_order": False, "shape": (n, D)})
        np.lib.format.write_array_header_2_0(fy, {"descr": "<f4", "fortran_order": False, "shape": (n,)})
        for start in range(0, n, BLOCK):
            rng = np.random.default_rng([seed, start // BLOCK])
            X = rng.uniform(-1, 1, (min(BLOCK, n - start), D)).astype("<f4")
            y = np.sin(3 * X[:, 0]) + X[:, 1] ** 2 + X[:, 2] * X[:, 3] + 0.1 * rng.standard_normal(len(X))
            fx.write(X.tobytes())
            fy.write(y.astype("<f4").tobytes())
    return x_path, y_path


def _child(argv: list[str]) -> tuple[float, float, str]:
    """(seconds, peak RSS in GB, stdout) of ``python -m neuralgp ARGV``; a failure raises with its stderr."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "neuralgp", *argv], stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)  # reaps the child with its own resource usage
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise RuntimeError(f"neuralgp {' '.join(argv)} failed:\n{err.read()[-2000:]}")
        return seconds, usage.ru_maxrss / 2 ** 20, out.read()


def streaming(sizes, train_rows: int, scratch=None, seed: int = 0, quick: bool = False) -> dict:
    runs = []
    with tempfile.TemporaryDirectory(dir=scratch, prefix="neuralgp-streaming-") as tmp:
        folder = Path(tmp)
        for n in sizes:
            t0 = time.perf_counter()
            x_path, y_path = write_rows(folder, n, seed)
            write_s = time.perf_counter() - t0
            for model, extra in MODELS.items():
                extra = extra[:-1] + ["20"] if quick else extra  # the last argument is the iteration count
                fit_s, fit_rss, stdout = _child(
                    ["fit", "--dataset", str(x_path), "--targets", str(y_path), "--model", model, "--train-rows",
                     str(train_rows), "--seed", str(seed), "--json", "--quiet", "--out", str(folder / model), *extra])
                metrics = json.loads(stdout)
                pred_s, pred_rss, _ = _child(["predict", str(folder / model / "model.pt"), str(x_path),
                                              "--output", str(folder / "pred.npy")])
                pred = np.load(folder / "pred.npy", mmap_mode="r")
                ok = pred.shape == (n, 2) and bool(np.isfinite(pred[-BLOCK:]).all())
                del pred
                os.remove(folder / "pred.npy")
                runs.append({"n": n, "model": model, "args": extra, "write_s": write_s,
                             "fit_s": fit_s, "fit_peak_rss_gb": fit_rss, "predict_s": pred_s,
                             "predict_peak_rss_gb": pred_rss, "predictions_complete": ok,
                             "file_gb": (x_path.stat().st_size + y_path.stat().st_size) / 2 ** 30,
                             **{k: metrics[k] for k in ("rmse", "nll", "coverage_95", "mean_z2", "n_sample",
                                                        "n_posterior_rows", "n_test", "train_seconds",
                                                        "posterior_seconds", "iterations")}})
                print(json.dumps(runs[-1]), flush=True)
            os.remove(x_path)
            os.remove(y_path)
    return {"D": D, "train_rows": train_rows, "seed": seed, "threads": os.cpu_count(), "runs": runs}


def format_streaming(res: dict) -> str:
    lines = [f"rows streamed from .npy files (D = {res['D']}, float32); feature map trained on "
             f"{res['train_rows']:,} sampled rows; posterior conditioned on every training row; all rows predicted",
             "| model | n | files GB | fit s (posterior s) | fit peak RSS GB | predict s | predict peak RSS GB | "
             "test RMSE | NLL | cov95 |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["runs"]:
        lines.append(f"| {r['model']} {' '.join(r['args'])} | {r['n']:,} | {r['file_gb']:.2f} | {r['fit_s']:.0f} "
                     f"({r['posterior_seconds']:.0f}) | {r['fit_peak_rss_gb']:.2f} | {r['predict_s']:.0f} | "
                     f"{r['predict_peak_rss_gb']:.2f} | {r['rmse']:.4f} | {r['nll']:.3f} | {r['coverage_95']:.3f} |")
    return "\n".join(lines)


@dataclass
class StreamingSuite:
    name: str = "streaming"

    def run(self, out, seed: int = 0, quick: bool = False, **_) -> dict:
        sizes = (20_000, 200_000) if quick else (1_000_000, 10_000_000, 100_000_000)
        return write_timing(out, self.name,
                            lambda: streaming(sizes, train_rows=5_000 if quick else 20_000, seed=seed, quick=quick,
                                              scratch=os.environ.get("NEURALGP_SCRATCH")),
                            keys=("commit", "command", "machine", "cpu", "cpu_count", "torch"))

    @staticmethod
    def format(result: dict) -> str:
        return format_streaming(result)


SUITES = [StreamingSuite()]

"""`neuralgp bench dbk-speed`: time of one full-batch training step, DBK vs the same network with MSE.

Both models share the feature network (backbone with r outputs); DBK puts the exact GP on top
(eq. 5, O(n r²)), the plain network a linear layer r → 1 trained by mean squared error. Steps are
timed in interleaved blocks so that machine noise hits both alike; the median block is reported.
"""

from __future__ import annotations

import platform
import statistics
import time

import numpy as np
import torch
from torch import nn

from neuralgp import datasets
from neuralgp.datasets.scaling import Scaler
from neuralgp.models.dbk import DBKRegressor, exact_objective
from neuralgp.train import adam


def _timed_steps(step, k: int) -> float:
    t0 = time.perf_counter()
    for _ in range(k):
        step()
    return (time.perf_counter() - t0) / k


def dbk_speed(dataset: str = "uci/pol", seed: int = 0, blocks: int = 7, steps_per_block: int = 20,
              root=None, **dbk_params) -> dict:
    ds = datasets.load(dataset, split="random", seed=seed, root=root)
    X = torch.as_tensor(Scaler("minmax").fit(ds.X_train).transform(ds.X_train), dtype=torch.float32)
    y_np = Scaler("standard").fit(ds.y_train[:, None]).transform(ds.y_train[:, None])[:, 0]
    y64, y32 = torch.as_tensor(y_np), torch.as_tensor(y_np, dtype=torch.float32)
    n = len(y_np)
    est = DBKRegressor(seed=seed, **dbk_params)
    torch.manual_seed(seed)
    dbk = est.build_module(X.shape[1])
    dbk_opt = adam(dbk, dbk.net, est.lr, est.weight_decay)
    plain = nn.Sequential(est.build_module(X.shape[1]).net, nn.Linear(est.rank, 1))
    plain_opt = adam(plain, plain[0], est.lr, est.weight_decay)

    def dbk_step():
        dbk_opt.zero_grad(set_to_none=True)
        (-exact_objective(dbk, X, y64, est._trace_regulariser()) / n).backward()
        dbk_opt.step()

    def plain_step():
        plain_opt.zero_grad(set_to_none=True)
        ((plain(X)[:, 0] - y32) ** 2).mean().backward()
        plain_opt.step()

    for step in (dbk_step, plain_step):  # warm-up
        _timed_steps(step, 3)
    dbk_times, plain_times = [], []
    for _ in range(blocks):
        plain_times.append(_timed_steps(plain_step, steps_per_block))
        dbk_times.append(_timed_steps(dbk_step, steps_per_block))
    t_dbk, t_plain = statistics.median(dbk_times), statistics.median(plain_times)
    return {"dataset": dataset, "n_train": n, "rank": est.rank, "backbone": est.backbone,
            "dbk_ms": 1e3 * t_dbk, "plain_ms": 1e3 * t_plain, "ratio": t_dbk / t_plain,
            "dbk_ms_blocks": [1e3 * t for t in dbk_times], "plain_ms_blocks": [1e3 * t for t in plain_times],
            "threads": torch.get_num_threads(), "machine": f"{platform.machine()} {platform.processor()}".strip(),
            "torch": torch.__version__, "numpy": np.__version__, "seed": seed,
            "blocks": blocks, "steps_per_block": steps_per_block}


def format_speed(res: dict) -> str:
    return (f"dbk-speed on {res['dataset']} (n = {res['n_train']}, r = {res['rank']}, {res['backbone']} backbone, "
            f"{res['threads']} threads, {res['machine']}, torch {res['torch']})\n"
            f"  plain network (MSE) step: {res['plain_ms']:.1f} ms\n"
            f"  DBK exact step:           {res['dbk_ms']:.1f} ms\n"
            f"  DBK / plain ratio:        {res['ratio']:.3f}   (median of {res['blocks']} blocks of "
            f"{res['steps_per_block']} steps)")

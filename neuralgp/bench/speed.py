"""`neuralgp bench dbk-speed`: time of one full-batch training step, DBK vs the same network with MSE.

Both models share the feature network (backbone with r outputs); DBK puts the exact GP on top
(eq. 5, O(n r²)), the plain network a linear layer r → 1 trained by mean squared error. DBK is timed with each
``training_gram_precision`` (float64, mixed, float32). Steps are timed in
interleaved blocks so that machine noise hits all alike; the median block is reported. The GP head
alone (statistics, Cholesky, log-likelihood and its gradient to a fixed Φ) is timed too: it is what
DBK adds to the network's step.
"""

from __future__ import annotations

import os
import platform
import statistics
import time

import numpy as np
import torch
from torch import nn

from neuralgp import datasets
from neuralgp.datasets.scaling import Scaler
from neuralgp.models.dbk import DBKRegressor
from neuralgp.models.peers import ExactGPRegressor, GPyTorchDBKRegressor
from neuralgp.posterior import PRECISIONS, ExactPosterior, exact_objective, gram_stats
from neuralgp.train import adam


def _timed_steps(step, k: int) -> float:
    t0 = time.perf_counter()
    for _ in range(k):
        step()
    return (time.perf_counter() - t0) / k


def _gpytorch_step(cls, X, y, seed, **params):
    """One full-batch ExactMarginalLogLikelihood step of a GPyTorch peer, built as its estimator builds it."""
    import gpytorch
    est = cls(seed=seed, verbose=False, **params)
    torch.manual_seed(seed)
    est._build(X, y)
    modules = est._modules()
    modules.train()
    feature = getattr(est.model_, "feature", None)
    opt = adam(modules, feature if feature is not None else nn.Module(), est.lr, est.weight_decay)
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(est.likelihood_, est.model_)

    def step():
        with est._settings():
            opt.zero_grad(set_to_none=True)
            (-mll(est.model_(X), y)).backward()
            opt.step()
    return step


def dbk_speed(dataset: str = "uci/pol", seed: int = 0, blocks: int = 25, steps_per_block: int = 10,
              gp_steps: int = 3, root=None, **dbk_params) -> dict:
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

    def dbk_step(precision):
        dbk_opt.zero_grad(set_to_none=True)
        (-exact_objective(dbk, X, y64, est._trace_regulariser(), precision) / n).backward()
        dbk_opt.step()

    def plain_step():
        plain_opt.zero_grad(set_to_none=True)
        ((plain(X)[:, 0] - y32) ** 2).mean().backward()
        plain_opt.step()

    with torch.no_grad():
        phi = dbk(X).requires_grad_(True)  # a leaf: time the GP head alone, without the network

    def head_only(precision):  # statistics, Cholesky, log-likelihood and the gradient back to Φ
        phi.grad = None
        (-ExactPosterior(gram_stats(phi, y64, precision=precision), dbk.noise()).log_marginal_likelihood() / n).backward()

    same_network = dict(feature_dim=est.rank, backbone=est.backbone, hidden=est.hidden, depth=est.depth,
                        activation=est.activation)
    steps = {"plain": plain_step, "gpytorch_dbk": _gpytorch_step(GPyTorchDBKRegressor, X, y32, seed, **same_network)}
    for p in PRECISIONS:
        steps[f"dbk_{p}"] = lambda p=p: dbk_step(p)
        steps[f"head_{p}"] = lambda p=p: head_only(p)
    for step in steps.values():  # warm-up
        _timed_steps(step, 3)
    times = {name: [] for name in steps}
    for _ in range(blocks):
        for name, step in steps.items():
            times[name].append(_timed_steps(step, steps_per_block))
    ms = {name: 1e3 * statistics.median(t) for name, t in times.items()}
    exact_gp = _gpytorch_step(ExactGPRegressor, X, y32, seed)  # seconds per step: timed alone, few steps
    exact_gp()
    ms["exact_gp"] = 1e3 * _timed_steps(exact_gp, gp_steps)
    default = est.training_gram_precision
    paired = [d / p for d, p in zip(times[f"dbk_{default}"], times["plain"])]  # same round of blocks
    quartiles = statistics.quantiles(paired, n=4) if len(paired) > 1 else paired * 3
    return {"dataset": dataset, "n_train": n, "rank": est.rank, "backbone": est.backbone, "depth": est.depth,
            "default_precision": default, "plain_ms": ms["plain"], "dbk_ms": ms[f"dbk_{default}"],
            "ratio": ms[f"dbk_{default}"] / ms["plain"], "block_ratio_quartiles": [quartiles[0], quartiles[2]],
            "dbk_ms_by_precision": {p: ms[f"dbk_{p}"] for p in PRECISIONS},
            "ratio_by_precision": {p: ms[f"dbk_{p}"] / ms["plain"] for p in PRECISIONS},
            "gp_head_ms_by_precision": {p: ms[f"head_{p}"] for p in PRECISIONS},
            "gpytorch_dbk_ms": ms["gpytorch_dbk"], "speedup_vs_gpytorch_dbk": ms["gpytorch_dbk"] / ms[f"dbk_{default}"],
            "exact_gp_ms": ms["exact_gp"], "speedup_vs_exact_gp": ms["exact_gp"] / ms[f"dbk_{default}"],
            "gp_steps": gp_steps, "blocks_ms": {name: [1e3 * x for x in t] for name, t in times.items()},
            "threads": torch.get_num_threads(), "machine": f"{platform.machine()} {platform.processor()}".strip(),
            "cpu_count": os.cpu_count(), "torch": torch.__version__, "numpy": np.__version__, "seed": seed,
            "blocks": blocks, "steps_per_block": steps_per_block}


def format_speed(res: dict) -> str:
    default = res["default_precision"]
    lines = [f"dbk-speed on {res['dataset']} (n = {res['n_train']}, r = {res['rank']}, {res['backbone']} backbone "
             f"of depth {res['depth']}, "
             f"{res['threads']} threads, {res['machine']}, torch {res['torch']})",
             f"  plain network (MSE) step:             {res['plain_ms']:.1f} ms"]
    for p in PRECISIONS:
        mark = "  <- default" if p == default else ""
        lines.append(f"  DBK exact step, {p:7s} Gram:        {res['dbk_ms_by_precision'][p]:.1f} ms   ratio "
                     f"{res['ratio_by_precision'][p]:.3f}   (GP head alone {res['gp_head_ms_by_precision'][p]:.1f} ms)"
                     f"{mark}")
    q1, q3 = res["block_ratio_quartiles"]
    lines.append(f"  (the default's ratio block by block, DBK block / plain block of the same round: "
                 f"quartiles {q1:.3f}–{q3:.3f})")
    lines += [f"  same model in GPyTorch (LinearKernel): {res['gpytorch_dbk_ms']:.1f} ms   DBK ({default}) is "
              f"{res['speedup_vs_gpytorch_dbk']:.2f}x faster",
              f"  GPyTorch exact RBF-ARD GP (CG 512):    {res['exact_gp_ms']:.0f} ms   DBK is "
              f"{res['speedup_vs_exact_gp']:.0f}x faster  (mean of {res['gp_steps']} steps)",
              f"  (median of {res['blocks']} interleaved blocks of {res['steps_per_block']} steps; the GP head alone is "
              f"Gram statistics, r×r Cholesky, log-likelihood and gradient to a fixed Φ)"]
    return "\n".join(lines)

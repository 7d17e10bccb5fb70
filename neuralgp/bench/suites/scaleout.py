"""``scaleout``: exact statistics and full-batch training steps of DBK across 1 and 2 worker processes (gloo on
127.0.0.1; issue 18). Strong scaling (the same n split over the workers), weak scaling (n per worker fixed), the
equality of 1- and 2-process statistics, and each worker's peak memory. A timing, not a table: ``run`` writes
``OUT/scaleout.json`` and prints a summary."""

from __future__ import annotations

import datetime
import json
import os
import resource
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from neuralgp import distributed
from neuralgp.bench.runner import write_timing
from neuralgp.models import DBKRegressor
from neuralgp.posterior import accumulate_stats
from neuralgp.posterior.objectives import exact_objective

D = 26  # uci/pol's width
ROW_BLOCK = 65536  # rows are generated in fixed blocks, so every worker count sees the same data


def _rows(start: int, stop: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic rows [start, stop) of one fixed data set: X uniform in [-1, 1]^D, y a smooth function + noise."""
    Xs, ys = [], []
    for block in range(start // ROW_BLOCK, (stop - 1) // ROW_BLOCK + 1):
        g = torch.Generator().manual_seed(seed * 1_000_003 + block)
        X = torch.rand(ROW_BLOCK, D, generator=g) * 2 - 1
        y = torch.sin(3 * X[:, 0]) + X[:, 1] ** 2 + 0.1 * torch.randn(ROW_BLOCK, generator=g)
        first = block * ROW_BLOCK
        Xs.append(X[max(start, first) - first:min(stop, first + ROW_BLOCK) - first])
        ys.append(y[max(start, first) - first:min(stop, first + ROW_BLOCK) - first])
    return torch.cat(Xs), torch.cat(ys).double()


def _timed(fn, repeats: int) -> float:
    """Best wall-clock seconds of ``repeats`` calls, all workers starting together."""
    best = float("inf")
    for _ in range(repeats):
        if distributed.is_distributed():
            dist.barrier()
        t0 = time.perf_counter()
        fn()
        if distributed.is_distributed():
            dist.barrier()
        best = min(best, time.perf_counter() - t0)
    return best


def _worker(rank: int, world: int, port: int, threads: int, plan: dict, out: str):
    torch.set_num_threads(threads)
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=600))
    with distributed.closing_group():
        torch.manual_seed(plan["seed"])
        module = DBKRegressor(seed=plan["seed"]).build_module(D)
        result = {}
        for kind, n_total in (("strong", plan["n"]), ("weak", plan["n_per_worker"] * world)):
            rows = distributed.shard(n_total)
            X, y = _rows(rows.start, rows.stop, plan["seed"])
            stats = None

            def statistics():
                nonlocal stats
                stats = distributed.reduce_stats(accumulate_stats(module, X, y))
            result[f"{kind}_stats_s"] = _timed(statistics, plan["repeats"])
            result[f"{kind}_n"] = n_total
            if kind == "strong":
                result["A"], result["b"] = stats.A.tolist(), stats.b.tolist()
        rows = distributed.shard(plan["n_train"])
        X, y = _rows(rows.start, rows.stop, plan["seed"])

        def training_step():
            module.zero_grad(set_to_none=True)
            (-exact_objective(module, X, y, False, "mixed") / plan["n_train"]).backward()
            distributed.sum_gradients(module.net.parameters())
        result["train_step_s"] = _timed(training_step, plan["repeats"])
        result["train_n"] = plan["n_train"]
        result["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
        Path(f"{out}.{rank}").write_text(json.dumps(result))


def _run(world: int, threads: int, plan: dict) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "result")
        ctx = mp.start_processes(_worker, args=(world, distributed.free_local_port(), threads, plan, out),
                                 nprocs=world, join=False, start_method="spawn")
        while not ctx.join():
            pass
        results = [json.loads(Path(f"{out}.{r}").read_text()) for r in range(world)]
    first = results[0]
    return {**{k: v for k, v in first.items() if k not in ("A", "b", "peak_rss_gb")},
            "peak_rss_gb_per_worker": [r["peak_rss_gb"] for r in results], "A": first["A"], "b": first["b"]}


def scaleout(quick: bool = False, seed: int = 0) -> dict:
    plan = dict(n=10_000 if quick else 1_000_000, n_per_worker=5_000 if quick else 500_000,
                n_train=5_000 if quick else 100_000, repeats=1 if quick else 3, seed=seed)
    cores = os.cpu_count() or 1
    configs = [("1 worker, 1 thread", 1, 1), ("2 workers, 1 thread each", 2, 1)]
    if cores >= 2 and not quick:  # the quick run (a test) spawns the two configurations it compares
        configs.insert(1, (f"1 worker, {min(cores, 2)} threads", 1, min(cores, 2)))
    runs = {name: _run(world, threads, plan) for name, world, threads in configs}
    ref = torch.tensor(runs[configs[0][0]]["A"], dtype=torch.float64)
    for run in runs.values():
        diff = torch.tensor(run.pop("A"), dtype=torch.float64) - ref
        run["stats_max_rel_diff_vs_1_worker"] = float(diff.abs().max() / ref.abs().max())
        run.pop("b")
    base = runs[configs[0][0]]
    two = runs["2 workers, 1 thread each"]
    return {"plan": plan, "runs": runs,
            "speedup_stats_2_workers_vs_1": base["strong_stats_s"] / two["strong_stats_s"],
            "weak_efficiency_stats": base["weak_stats_s"] / two["weak_stats_s"],  # 1 = twice the rows, same time
            "speedup_train_step_2_workers_vs_1": base["train_step_s"] / two["train_step_s"]}


def format_scaleout(res: dict) -> str:
    plan = res["plan"]
    lines = [f"exact statistics of DBK (rank 128, D = {D}) on synthetic rows; best of {plan['repeats']}",
             "| workers | strong: n | s | weak: n | s | train step: n | s | peak RSS GB / worker | "
             "stats vs 1 worker |", "|---|---|---|---|---|---|---|---|---|"]
    for name, r in res["runs"].items():
        lines.append(f"| {name} | {r['strong_n']:,} | {r['strong_stats_s']:.3f} | {r['weak_n']:,} | "
                     f"{r['weak_stats_s']:.3f} | {r['train_n']:,} | {r['train_step_s']:.3f} | "
                     f"{', '.join(f'{g:.2f}' for g in r['peak_rss_gb_per_worker'])} | "
                     f"{r['stats_max_rel_diff_vs_1_worker']:.1e} |")
    lines.append(f"\nstrong-scaling speed-up of the statistics, 2 workers vs 1 (1 thread each): "
                 f"{res['speedup_stats_2_workers_vs_1']:.2f}×; of a training step: "
                 f"{res['speedup_train_step_2_workers_vs_1']:.2f}×; weak-scaling efficiency of the statistics "
                 f"(1 = twice the rows in the same time): {res['weak_efficiency_stats']:.2f}")
    return "\n".join(lines)


@dataclass
class ScaleoutSuite:
    name: str = "scaleout"

    def run(self, out, seed: int = 0, quick: bool = False, **_) -> dict:
        return write_timing(out, self.name, lambda: scaleout(quick=quick, seed=seed),
                            keys=("commit", "command", "machine", "cpu", "cpu_count", "torch"))

    @staticmethod
    def format(result: dict) -> str:
        return format_scaleout(result)


SUITES = [ScaleoutSuite()]

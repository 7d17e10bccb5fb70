"""`neuralgp bench SUITE`: models × datasets × seeds, one JSON record per run, resumable, table and plot.

Every run appends a record to ``OUT/results.jsonl`` (metrics, timings, iterations, peak memory, status,
library versions, threads, machine); a record already there is not run again, so an interrupted suite
resumes. ``OUT/table.md`` puts the paper's numbers beside ours; ``OUT/metrics.png`` plots them.
A model that cannot run (memory guard) is recorded with its reason; a run that reaches the wall-clock
budget keeps its best state and is marked time-capped.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from neuralgp import datasets
from neuralgp.bench.evaluate import evaluate_regression
from neuralgp.bench.paper_tables import dbk_table1
from neuralgp.models import (DBKRegressor, DKLRegressor, ExactGPRegressor, ResourceLimitError, SGPRRegressor,
                             SparseDKLRegressor, SVDKLRegressor, SVGPRegressor)

EXACT_GROUP = ["GP", "sGP", "DKL", "sDKL", "DBK", "DBK (paper corr.)", "DBK-c", "DBK-r", "DBK-cr"]
SVI_GROUP = ["SVGP", "SVDKL", "SVDBK", "SVDBK-c", "SVDBK-r", "SVDBK-cr"]


def _dbk(**kw):
    return lambda common: DBKRegressor(**{**common, **kw})


def _peer(cls):
    return lambda common: cls(**common)


DBK_TABLE1_MODELS = {
    "GP": _peer(ExactGPRegressor), "sGP": _peer(SGPRRegressor), "DKL": _peer(DKLRegressor),
    "sDKL": _peer(SparseDKLRegressor), "DBK": _dbk(), "DBK (paper corr.)": _dbk(normalize_features=False),
    "DBK-c": _dbk(variance_correction=False), "DBK-r": _dbk(rank=1),
    "DBK-cr": _dbk(rank=1, variance_correction=False), "SVGP": _peer(SVGPRegressor), "SVDKL": _peer(SVDKLRegressor),
    "SVDBK": _dbk(inference="svi"), "SVDBK-c": _dbk(inference="svi", variance_correction=False),
    "SVDBK-r": _dbk(inference="svi", rank=1), "SVDBK-cr": _dbk(inference="svi", rank=1, variance_correction=False),
}


@dataclass
class Suite:
    name: str
    models: dict
    datasets: list  # names for datasets.load; "synthetic/step1d@N" sets the training size N
    seeds: list = field(default_factory=lambda: [0, 1, 2, 3, 4])
    paper: object = None  # dataset -> {row: [MAE, RMSE, NLL, time]}
    model_params: dict = field(default_factory=dict)  # given to every model of the suite
    runs: object = None  # (model, dataset) -> bool: which pairs belong to the suite (default all)
    quick_datasets: list = None


SCALING_N = [10 ** k for k in range(2, 8)]


def _scaling_runs(model: str, dataset: str) -> bool:
    """GP and DKL up to n = 10⁵ (where the paper's stop), DBK up to 10⁷."""
    return model == "DBK" or int(dataset.split("@")[1]) <= 10 ** 5


SUITES = {
    "dbk-table1": Suite("dbk-table1", DBK_TABLE1_MODELS, ["uci/pol", "uci/protein", "uci/kin40k", "uci/keggdirected"],
                        paper=dbk_table1, quick_datasets=["uci/pol", "uci/protein"]),
    "dbk-scaling": Suite("dbk-scaling", {"GP": _peer(ExactGPRegressor), "DKL": _peer(DKLRegressor), "DBK": _dbk()},
                         [f"synthetic/step1d@{n}" for n in SCALING_N], model_params={"backbone": "mlp"},
                         runs=_scaling_runs, quick_datasets=["synthetic/step1d@100", "synthetic/step1d@1000"]),
}
QUICK = dict(n_train=300, n_val=100, n_test=200, common={"max_iter": 10, "max_epochs": 2, "eval_every": 5})


def _load(name: str, seed: int, root):
    base, _, n = name.partition("@")
    if n:
        return datasets.load(base, seed=seed, n=int(n))
    return datasets.load(name, split="random", seed=seed, root=root)


def _subsample(ds, quick: bool):
    if not quick:
        return ds
    for part, n in (("train", QUICK["n_train"]), ("val", QUICK["n_val"]), ("test", QUICK["n_test"])):
        setattr(ds, f"X_{part}", getattr(ds, f"X_{part}")[:n])
        setattr(ds, f"y_{part}", getattr(ds, f"y_{part}")[:n])
    return ds


def _reset_peak_memory() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _peak_memory_mb() -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def environment() -> dict:
    import gpytorch
    import scipy
    import sklearn
    from neuralgp import __version__
    return {"neuralgp": __version__, "torch": torch.__version__, "gpytorch": gpytorch.__version__,
            "numpy": np.__version__, "scipy": scipy.__version__, "sklearn": sklearn.__version__,
            "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
            "machine": f"{platform.machine()} {platform.node()}",
            "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"}


def read_records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_suite(name: str, out, seeds=None, dataset_names=None, model_names=None, quick: bool = False,
              budget_s: float = 1800.0, device: str = "cpu", root=None, verbose: bool = True) -> Path:
    suite = SUITES[name]
    seeds = ([0] if quick else suite.seeds) if seeds is None else seeds
    dataset_names = dataset_names or (suite.quick_datasets if quick else suite.datasets)
    model_names = model_names or list(suite.models)
    unknown = [m for m in model_names if m not in suite.models]
    if unknown:
        raise ValueError(f"unknown models {unknown}; {name} has {list(suite.models)}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    done = {(r["model"], r["dataset"], r["seed"], r["quick"]) for r in read_records(results)}
    env = environment()
    jobs = [(d, s, m) for d in dataset_names for s in seeds for m in model_names
            if (m, d, s, quick) not in done and (suite.runs is None or suite.runs(m, d))]
    common = {"verbose": False, "max_time": budget_s, "device": device, **suite.model_params,
              **(QUICK["common"] if quick else {})}
    loaded = {}
    for dataset, seed, model_name in tqdm(jobs, desc=name, unit="run", disable=not verbose):
        if (dataset, seed) not in loaded:
            loaded = {(dataset, seed): _subsample(_load(dataset, seed, root), quick)}
        ds = loaded[(dataset, seed)]
        record = {"suite": name, "model": model_name, "dataset": dataset, "split": "random", "seed": seed,
                  "quick": quick, "budget_s": budget_s, **env}
        model = suite.models[model_name]({**common, "seed": seed})
        _reset_peak_memory()
        started = time.perf_counter()
        try:
            metrics = evaluate_regression(model, ds)
            record.update(metrics, status="time-capped" if metrics["out_of_time"] else "ok")
        except ResourceLimitError as exc:
            record.update(status="skipped: memory", reason=str(exc))
        except (FloatingPointError, RuntimeError, torch.cuda.OutOfMemoryError) as exc:
            record.update(status="failed", reason=f"{type(exc).__name__}: {str(exc)[:300]}")
        record.update(wall_seconds=time.perf_counter() - started, peak_memory_mb=_peak_memory_mb())
        with open(results, "a") as fh:
            fh.write(json.dumps(record) + "\n")
    records = [r for r in read_records(results) if r["quick"] == quick]
    scaling = suite.name == "dbk-scaling"
    (out / "table.md").write_text((scaling_table if scaling else table)(suite, records) + "\n")
    (scaling_plot if scaling else plot)(suite, records, out / "metrics.png")
    return out


def _fmt(values) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{statistics.mean(values):.4f} ({statistics.stdev(values):.4f})"


def table(suite: Suite, records: list[dict]) -> str:
    """Paper layout: per dataset, the exact and the SVI group; mean (std) over seeds, paper beside ours, best bold."""
    lines = [f"# {suite.name}: ours beside the paper's (p.) numbers",
             "", "Mean (std) over seeds; **bold** = our best in the group; † = some seeds hit the time budget; "
             "'skipped'/'failed' rows give the reason in results.jsonl. Metrics on standardised targets.", ""]
    for dataset in sorted({r["dataset"] for r in records}, key=lambda d: suite.datasets.index(d)
                          if d in suite.datasets else 99):
        paper = suite.paper(dataset) if suite.paper else {}
        lines += [f"## {dataset}", "",
                  "| model | seeds | MAE | p. MAE | RMSE | p. RMSE | NLL | p. NLL | train s | p. s | peak MB | status |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for group in (EXACT_GROUP, SVI_GROUP):
            rows = {m: [r for r in records if r["dataset"] == dataset and r["model"] == m] for m in group}
            rows = {m: rs for m, rs in rows.items() if rs}
            ok = {m: [r for r in rs if "rmse" in r] for m, rs in rows.items()}
            best = {k: min((statistics.mean(x[k] for x in rs) for rs in ok.values() if rs), default=None)
                    for k in ("mae", "rmse", "nll")}
            for m, rs in rows.items():
                p = paper.get(m, ["–"] * 4)  # "DBK (paper corr.)" has no row of its own in the paper
                cells = []
                for i, k in enumerate(("mae", "rmse", "nll")):
                    vals = [x[k] for x in ok[m]]
                    bold = vals and statistics.mean(vals) == best[k]
                    cells += [f"**{_fmt(vals)}**" if bold else _fmt(vals), p[i]]
                secs = [x["train_seconds"] for x in ok[m]]
                peak = [x["peak_memory_mb"] for x in rs if x.get("peak_memory_mb")]
                statuses = sorted({x["status"] for x in rs})
                mark = " †" if "time-capped" in statuses else ""
                cells += [f"{statistics.mean(secs):.1f}" if secs else "–", p[3],
                          f"{max(peak):.0f}" if peak else "–", ", ".join(statuses)]
                lines.append(f"| {m}{mark} | {len(ok[m])}/{len(rs)} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def plot(suite: Suite, records: list[dict], path: Path):
    """RMSE and NLL per model and dataset (mean ± std over seeds), paper values as black ticks."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sets = [d for d in suite.datasets if any(r["dataset"] == d and "rmse" in r for r in records)]
    if not sets:
        return
    models = [m for m in EXACT_GROUP + SVI_GROUP if any(r["model"] == m for r in records)]
    fig, axes = plt.subplots(2, len(sets), figsize=(5 * len(sets), 7), squeeze=False)
    for j, dataset in enumerate(sets):
        paper = suite.paper(dataset) if suite.paper else {}
        for i, (key, col) in enumerate((("rmse", 1), ("nll", 2))):
            ax = axes[i, j]
            for x, m in enumerate(models):
                vals = [r[key] for r in records if r["dataset"] == dataset and r["model"] == m and key in r]
                if vals:
                    ax.bar(x, np.mean(vals), yerr=np.std(vals), color="C0" if m in EXACT_GROUP else "C1")
                p = paper.get(m, [])
                if len(p) > col and p[col] not in ("−", "–"):
                    ax.plot([x - 0.4, x + 0.4], [float(p[col].split()[0])] * 2, "k-", lw=2)
            ax.set_xticks(range(len(models)), models, rotation=70, fontsize=7)
            ax.set_title(f"{dataset}: {key.upper()} (black: paper)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _n(dataset: str) -> int:
    return int(dataset.split("@")[1])


def scaling_table(suite: Suite, records: list[dict]) -> str:
    """Figure 3 as a table: per n and model, seconds per iteration, peak memory, RMSE and NLL."""
    lines = [f"# {suite.name}: cost and accuracy against the training size n (1-D step function)", "",
             "Mean over seeds. s/it = training seconds per full-batch iteration (validation included); "
             "† = stopped by the time budget, so RMSE/NLL are those of a partly trained model.", "",
             "| n | model | seeds | s/it | iterations | train s | peak MB | RMSE | NLL | status |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    keys = sorted({(_n(r["dataset"]), r["model"]) for r in records})
    for n, model in keys:
        rs = [r for r in records if _n(r["dataset"]) == n and r["model"] == model]
        ok = [r for r in rs if "rmse" in r]
        statuses = sorted({r["status"] for r in rs})
        peak = max((r["peak_memory_mb"] or 0) for r in rs)
        if ok:
            its = statistics.mean(r["iterations"] for r in ok)
            secs = statistics.mean(r["train_seconds"] for r in ok)
            cells = [f"{secs / max(its, 1):.4g}", f"{its:.0f}", f"{secs:.0f}", f"{peak:.0f}",
                     _fmt([r["rmse"] for r in ok]), _fmt([r["nll"] for r in ok])]
        else:
            cells = ["–", "–", "–", f"{peak:.0f}" if peak else "–", "–", "–"]
        mark = " †" if "time-capped" in statuses else ""
        lines.append(f"| {n:.0e} | {model}{mark} | {len(ok)}/{len(rs)} | " + " | ".join(cells)
                     + f" | {', '.join(statuses)} |")
    return "\n".join(lines)


def scaling_plot(suite: Suite, records: list[dict], path: Path):
    """Log-log seconds per iteration and peak memory against n (the paper's Figure 3, with memory)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4))
    for model in suite.models:
        pts = sorted((_n(r["dataset"]), r["train_seconds"] / max(r["iterations"], 1), r["peak_memory_mb"] or np.nan)
                     for r in records if r["model"] == model and "rmse" in r)
        if pts:
            n, t, m = zip(*pts)
            ax_t.loglog(n, t, "o-", label=model)
            ax_m.loglog(n, m, "o-", label=model)
    ax_t.set(xlabel="training points n", ylabel="seconds per iteration", title="time per full-batch iteration")
    ax_m.set(xlabel="training points n", ylabel="peak resident memory (MB)", title="peak memory")
    for ax in (ax_t, ax_m):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)

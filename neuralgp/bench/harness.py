"""`neuralgp bench SUITE`: models × datasets × seeds, one JSON record per run, resumable, table and plot.

Every run appends a record to ``OUT/results.jsonl`` (metrics, timings, iterations, peak memory, status,
library versions, threads, machine); a record already there is not run again, so an interrupted suite
resumes. ``OUT/table.md`` puts the paper's numbers beside ours; ``OUT/metrics.png`` plots them.
A model that cannot run (memory guard) is recorded with its reason; a run that reaches the wall-clock
budget keeps its best state and is marked time-capped.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from neuralgp import datasets
from neuralgp.errors import InputError
from neuralgp.bench.evaluate import evaluate_classification, evaluate_regression
from neuralgp.bench.paper_tables import FMGP_ABLATION, FMGP_CLASSIFICATION, FMGP_REGRESSION, dbk_table1
from neuralgp.models import (DBKRegressor, DKLRegressor, ExactGPRegressor, FMGPClassifier, FMGPRegressor,
                             NetworkClassifier, NNGPRegressor, ResourceLimitError, SGPRRegressor, SparseDKLRegressor,
                             SVDKLRegressor, SVGPClassifier, SVGPRegressor)

EXACT_GROUP = ["GP", "sGP", "DKL", "sDKL", "DBK", "DBK (paper corr.)", "DBK-c", "DBK-r", "DBK-cr"]
SVI_GROUP = ["SVGP", "SVDKL", "SVDBK", "SVDBK-c", "SVDBK-r", "SVDBK-cr"]


def _make(cls, **fixed):
    """Factory (common parameters, n_train) → estimator; common parameters a class lacks are left out."""
    names = set(cls._get_param_names())
    return lambda common, n_train: cls(**{k: v for k, v in {**common, **fixed}.items() if k in names})


def _dbk(**kw):
    return _make(DBKRegressor, **kw)


def _peer(cls):
    return _make(cls)


def var_inducing_points(n: int) -> int:
    """FM-GP's rule for the "Var" baseline: 1000 below 10⁴ points, 500 below 5·10⁴, 400 below 10⁶, else 100."""
    return 1000 if n < 10 ** 4 else 500 if n < 5 * 10 ** 4 else 400 if n < 10 ** 6 else 100


def _var(common, n_train):
    """SVGP, exponential kernel, the paper's inducing-point rule, about 400 Adam steps (batch 1024, lr 0.01)."""
    batches = math.ceil(n_train / 1024)
    return _make(SVGPRegressor, base_kernel="matern12", num_inducing=min(var_inducing_points(n_train), n_train),
                 batch_size=1024, lr=0.01, max_epochs=math.ceil(400 / batches),
                 eval_every=1)(common, n_train)


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
    split: str = "random"
    task: str = "regression"
    recalibrate: bool = False  # FM-GP's protocol: every model's variances recalibrated on the validation part
    columns: list = None  # metric tables: (record key, header, index into the paper's tuple or None)
    note: str = ""


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
FMGP_REGRESSION_MODELS = {"FM-GP": _make(FMGPRegressor), "Var": _var, "GPnn": _make(NNGPRegressor), "DBK": _dbk()}
def _var_classifier(common, n_train):
    """SVGP per class on Dirichlet targets, 200 inducing points (the paper's), about 400 Adam steps."""
    return _make(SVGPClassifier, num_inducing=min(200, n_train), batch_size=1024,
                 max_epochs=math.ceil(400 / math.ceil(n_train / 1024)))(common, n_train)


FMGP_CLASSIFICATION_MODELS = {"FM-GP": _make(FMGPClassifier), "Var": _var_classifier,
                              "Network": _make(NetworkClassifier)}
FMGP_ABLATION_MODELS = {
    **{f"p={p}": _make(FMGPRegressor, n_features=p) for p in (64, 128, 256)},
    **{f"w={w}": _make(FMGPRegressor, hidden=w) for w in (128, 256)},
    "MLP8xMLP8": _make(FMGPRegressor, product=(8, 8)), "MLP8xMLP16": _make(FMGPRegressor, product=(8, 16))}
FMGP_NOTE = ("Protocol of the FM-GP paper: 1000 test and 1000 recalibration points, the rest train; every model's "
             "variances are recalibrated on the recalibration points (Algorithm 1). MSE on targets standardised by "
             "the training mean/std. Our data differ from the paper's: parkinsons keeps test_time and lacks "
             "motor_UPDRS; bike keeps the `casual` and `registered` columns that sum to the target.")

SUITES.update({
    "fmgp-regression": Suite(
        "fmgp-regression", FMGP_REGRESSION_MODELS,
        ["uci/parkinsons", "uci/bike", "uci/protein", "uci/kin40k", "uci/keggdirected"],
        paper=lambda d: FMGP_REGRESSION.get(d, {}), split="holdout:1000:1000", recalibrate=True,
        quick_datasets=["uci/parkinsons"], note=FMGP_NOTE,
        columns=[("mse", "MSE", 0), ("nll", "NLL", None), ("mean_z2", "mean z²", None),
                 ("train_seconds", "train s", 1), ("predict_seconds_per_point", "predict s/point", 2)]),
    "fmgp-classification": Suite(
        "fmgp-classification", FMGP_CLASSIFICATION_MODELS,
        ["uci_classification/magic", "uci_classification/letter", "uci_classification/htru2", "digits"],
        paper=lambda d: FMGP_CLASSIFICATION.get(d, {}), split="holdout:1000:1000", task="classification",
        quick_datasets=["uci_classification/magic"],
        note="1000 test and 1000 calibration points (digits: 20 % / 20 %), the rest train; temperature scaling "
             "on the calibration points for every model.",
        columns=[("error", "error", 0), ("ece", "ECE", 1), ("nll", "NLL", None), ("brier", "Brier", None),
                 ("train_seconds", "train s", 2)]),
    "fmgp-ablation": Suite(
        "fmgp-ablation", FMGP_ABLATION_MODELS, ["uci/parkinsons", "uci/bike", "uci/protein"],
        paper=lambda d: {k: (v,) for k, v in FMGP_ABLATION.get(d, {}).items()}, split="holdout:1000:1000",
        recalibrate=True, quick_datasets=["uci/parkinsons"], note=FMGP_NOTE,
        columns=[("mse", "MSE", 0), ("nll", "NLL", None), ("train_seconds", "train s", None),
                 ("predict_seconds_per_point", "predict s/point", None)]),
})
QUICK = dict(n_train=300, n_val=100, n_test=200, common={"max_iter": 10, "max_epochs": 2, "eval_every": 5})


def _load(name: str, seed: int, root, split: str):
    base, _, n = name.partition("@")
    if n:
        return datasets.load(base, seed=seed, n=int(n))
    if name == "digits" and split.startswith("holdout"):
        split = "holdout:0.2:0.2"  # 1797 images: 1000 + 1000 would leave no training set
    return datasets.load(name, split=split, seed=seed, root=root)


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


def source_commit() -> str:
    """The git commit of the neuralgp source that runs (``+dirty`` with uncommitted changes to tracked files);
    outside a git checkout ``$NEURALGP_COMMIT`` (set by whoever copied the tree), else "unknown"."""
    src = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=src, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=src,
                               capture_output=True, text=True, check=True).stdout.strip()
        return head.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get("NEURALGP_COMMIT", "unknown")


def environment() -> dict:
    import gpytorch
    import scipy
    import sklearn
    from neuralgp import __version__
    return {"neuralgp": __version__, "torch": torch.__version__, "gpytorch": gpytorch.__version__,
            "numpy": np.__version__, "scipy": scipy.__version__, "sklearn": sklearn.__version__,
            "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
            "machine": f"{platform.machine()} {platform.node()}",
            "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
            "commit": source_commit(), "command": shlex.join(["neuralgp", *sys.argv[1:]])}


def read_records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_suite(name: str, out, seeds=None, dataset_names=None, model_names=None, quick: bool = False,
              budget_s: float = 1800.0, device: str = "cpu", root=None, verbose: bool = True,
              report_only: bool = False, depth: int | None = None) -> Path:
    """Run the missing (model, dataset, seed) jobs of a suite, then write ``table.md`` and the plot.

    ``report_only`` runs nothing and rewrites the report from the records already in ``out``. ``depth``
    sets the network depth of every model that has one (default: each model's own). Each record holds the
    model's scalar parameters.
    """
    suite = SUITES[name]
    seeds = ([0] if quick else suite.seeds) if seeds is None else seeds
    dataset_names = dataset_names or (suite.quick_datasets if quick else suite.datasets)
    model_names = model_names or list(suite.models)
    unknown = [m for m in model_names if m not in suite.models]
    if unknown:
        raise InputError(f"unknown models {unknown}; {name} has {list(suite.models)}")
    out = Path(out)
    results = out / "results.jsonl"
    if report_only and not any(r["quick"] == quick for r in read_records(results)):
        raise InputError(f"{results} holds no {'quick ' if quick else ''}records to report; run the suite "
                         f"into {out} first (or drop --report-only)")
    out.mkdir(parents=True, exist_ok=True)
    done = {(r["model"], r["dataset"], r["seed"], r["quick"]) for r in read_records(results)}
    env = environment()
    jobs = [] if report_only else [(d, s, m) for d in dataset_names for s in seeds for m in model_names
                                   if (m, d, s, quick) not in done and (suite.runs is None or suite.runs(m, d))]
    common = {"verbose": False, "max_time": budget_s, "device": device, **suite.model_params,
              **(QUICK["common"] if quick else {}), **({} if depth is None else {"depth": depth})}
    loaded = {}
    for dataset, seed, model_name in tqdm(jobs, desc=name, unit="run", disable=not verbose):
        if (dataset, seed) not in loaded:
            loaded = {(dataset, seed): _subsample(_load(dataset, seed, root, suite.split), quick)}
        ds = loaded[(dataset, seed)]
        record = {"suite": name, "model": model_name, "dataset": dataset, "split": ds.split, "seed": seed,
                  "quick": quick, "budget_s": budget_s, **env}
        model = suite.models[model_name]({**common, "seed": seed}, len(ds.y_train))
        record["params"] = {k: v for k, v in model.get_params().items()
                            if v is None or isinstance(v, (bool, int, float, str))}
        _reset_peak_memory()
        started = time.perf_counter()
        try:
            if suite.task == "classification":
                metrics = evaluate_classification(model, ds)
            else:
                metrics = evaluate_regression(model, ds, recalibrate=suite.recalibrate)
            record.update(metrics, status="time-capped" if metrics["out_of_time"] else "ok")
        except ResourceLimitError as exc:
            record.update(status="skipped: memory", reason=str(exc))
        except (FloatingPointError, RuntimeError, torch.cuda.OutOfMemoryError) as exc:
            record.update(status="failed", reason=f"{type(exc).__name__}: {str(exc)[:300]}")
        record.update(wall_seconds=time.perf_counter() - started, peak_memory_mb=_peak_memory_mb())
        with open(results, "a") as fh:
            fh.write(json.dumps(record) + "\n")
    records = [r for r in read_records(results) if r["quick"] == quick]
    if suite.columns:
        report, draw = metric_table, metric_plot
    elif suite.name == "dbk-scaling":
        report, draw = scaling_table, scaling_plot
    else:
        report, draw = table, plot
    (out / "table.md").write_text(report(suite, records) + "\n")
    draw(suite, records, out / "metrics.png")
    return out


def _fmt(values) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{statistics.mean(values):.4f} ({statistics.stdev(values):.4f})"


def _run_on(records: list[dict]) -> str:
    """Where and under which budget the runs of a row ran, e.g. 'cpu, 1 thread, 120 s'."""
    where = set()
    for r in records:
        device, threads = r.get("device", "cpu").replace("NVIDIA ", ""), r.get("threads")
        if device == "cpu" and threads:
            device += f", {threads} thread" + ("s" if threads != 1 else "")
        where.add(f"{device}, {r.get('budget_s', 0):.0f} s")
    return "; ".join(sorted(where))


def table(suite: Suite, records: list[dict]) -> str:
    """Paper layout: per dataset, the exact and the SVI group; mean (std) over seeds, paper beside ours, best bold."""
    lines = [f"# {suite.name}: ours beside the paper's (p.) numbers",
             "", "Mean (std) over seeds; **bold** = our best in the group; † = some seeds hit the time budget; "
             "'skipped'/'failed' rows give the reason in results.jsonl. Metrics on standardised targets; "
             "iterations = full-batch steps, or epochs for SVGP/SVDKL/SVDBK.", ""]
    for dataset in sorted({r["dataset"] for r in records}, key=lambda d: suite.datasets.index(d)
                          if d in suite.datasets else 99):
        paper = suite.paper(dataset) if suite.paper else {}
        lines += [f"## {dataset}", "",
                  "| model | seeds | MAE | p. MAE | RMSE | p. RMSE | NLL | p. NLL | train s | p. s | iterations | peak MB "
                  "| status | run on |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
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
                its = [x["iterations"] for x in ok[m]]
                cells += [f"{statistics.mean(secs):.1f}" if secs else "–", p[3],
                          f"{statistics.mean(its):.0f}" if its else "–",
                          f"{max(peak):.0f}" if peak else "–", ", ".join(statuses), _run_on(rs)]
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


def _mean_std(values, digits=4) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.{digits}g}"
    return f"{statistics.mean(values):.{digits}g} ± {statistics.stdev(values):.{digits}g}"


def metric_table(suite: Suite, records: list[dict]) -> str:
    """Per dataset: one row per model, mean ± std over seeds of each of ``suite.columns``, the paper beside."""
    lines = [f"# {suite.name}: ours beside the paper's (p.) numbers", "", suite.note, "",
             "Mean ± std over seeds; **bold** = our best of the column (lower is better; mean z²: closest to 1); "
             "† = some seeds hit the "
             "time budget; 'skipped'/'failed' rows give the reason in results.jsonl.", ""]
    header = ["model", "seeds"]
    for key, label, paper_idx in suite.columns:
        header += [label] + ([f"p. {label}"] if paper_idx is not None else [])
    for dataset in [d for d in suite.datasets if any(r["dataset"] == d for r in records)]:
        paper = suite.paper(dataset) if suite.paper else {}
        lines += [f"## {dataset}", "", "| " + " | ".join(header + ["status"]) + " |",
                  "|" + "---|" * (len(header) + 1)]
        rows = {m: [r for r in records if r["dataset"] == dataset and r["model"] == m] for m in suite.models}
        rows = {m: rs for m, rs in rows.items() if rs}
        ok = {m: [r for r in rs if r["status"] in ("ok", "time-capped")] for m, rs in rows.items()}
        for m, rs in rows.items():
            cells = [m + (" †" if any(r["status"] == "time-capped" for r in rs) else ""), f"{len(ok[m])}/{len(rs)}"]
            for key, label, paper_idx in suite.columns:
                badness = (lambda v: abs(v - 1.0)) if key == "mean_z2" else (lambda v: v)  # z²: 1 is best
                means = {mm: badness(statistics.mean(r[key] for r in o)) for mm, o in ok.items() if o}
                vals = [r[key] for r in ok[m]]
                cell = _mean_std(vals)
                cells.append(f"**{cell}**" if vals and means[m] == min(means.values()) and len(means) > 1 else cell)
                if paper_idx is not None:
                    p = paper.get(m)
                    cells.append(p[paper_idx] if p and len(p) > paper_idx else "–")
            lines.append("| " + " | ".join(cells + [", ".join(sorted({r["status"] for r in rs}))]) + " |")
        lines.append("")
    return "\n".join(lines)


def metric_plot(suite: Suite, records: list[dict], path: Path):
    """The first two metrics of the suite per model and dataset (mean ± std over seeds)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sets = [d for d in suite.datasets if any(r["dataset"] == d and r["status"] == "ok" for r in records)]
    if not sets:
        return
    keys = suite.columns[:2]
    fig, axes = plt.subplots(len(keys), len(sets), figsize=(4 * len(sets), 3.5 * len(keys)), squeeze=False)
    models = list(suite.models)
    for j, dataset in enumerate(sets):
        for i, (key, label, _) in enumerate(keys):
            ax = axes[i, j]
            for x, m in enumerate(models):
                vals = [r[key] for r in records if r["dataset"] == dataset and r["model"] == m and key in r]
                if vals:
                    ax.bar(x, np.mean(vals), yerr=np.std(vals), color=f"C{x}")
            ax.set_xticks(range(len(models)), models, rotation=45, fontsize=8)
            ax.set_title(f"{dataset}: {label}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)

"""The paper-agnostic benchmark runner: a suite's (model, dataset, seed) jobs, one JSON record each, resumable.

Every run appends a record to ``OUT/results.jsonl``: metrics, timings, iterations, peak memory, status, the
model's parameters, library versions, threads, machine, the git commit and the exact command. A record already
there is not run again, so an interrupted suite resumes. A model that cannot run (memory guard) is recorded with
its reason; a run that reaches the wall-clock budget keeps its best state and is marked time-capped. Then the
suite's report writes ``OUT/table.md`` and ``OUT/metrics.png``. Suites live in ``neuralgp.bench.suites``.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from neuralgp import datasets
from neuralgp.bench.evaluate import evaluate_classification, evaluate_regression
from neuralgp.errors import InputError, ResourceLimitError


@dataclass
class Suite:
    """A table of a paper: rows (models) × datasets × seeds, and how to report it.

    ``models``: row name → factory(shared parameters, n_train) → estimator (``neuralgp.registry.factory``).
    ``report``: (table writer, plot writer), each taking (suite, records[, path]); ``paper``: dataset → the
    published {row: values} to print beside ours.
    """

    name: str
    models: dict
    datasets: list  # names for datasets.load; "synthetic/step1d@N" sets the training size N
    report: tuple
    seeds: object = field(default_factory=lambda: [0, 1, 2, 3, 4])  # a list, or dataset -> list
    paper: object = None
    model_params: dict = field(default_factory=dict)  # given to every model of the suite
    runs: object = None  # (model, dataset) -> bool: which pairs belong to the suite (default all)
    quick_datasets: list = None
    quick_models: list = None  # the rows a --quick run without --models runs (default all)
    split: object = "random"  # a protocol, or (dataset, seed) -> protocol (a split index per seed)
    task: str = "regression"
    merge_validation: frozenset = frozenset()  # rows fitted by plain fit(X, y) on the training and validation parts
    recalibrate: bool = False  # FM-GP's protocol: every model's variances recalibrated on the validation part
    budget_s: float = 1800.0  # wall-clock seconds of training per run, unless the command gives --budget
    # row -> its Gaussian twin: a Student-t row's fit also scored under the Gaussian of the same mean and variance,
    # recorded as the twin's run (``evaluate_regression(gaussian_twin=True)``); the twin runs by itself only when
    # its row does not run
    gaussian_twins: dict = field(default_factory=dict)
    groups: list = None  # row groups of a grouped table (the DBK paper's exact and SVI halves)
    columns: list = None  # metric tables: (record key, header, index into the paper's tuple or None)
    note: str = ""

    def run(self, out, **options) -> Path:
        return run_suite(self, out, **options)


QUICK = dict(n_train=300, n_val=100, n_test=200, common={"max_iter": 10, "max_epochs": 2, "eval_every": 5,
                                                          "aks_repeats": 3, "ard_steps": 30})


QUICK_NOTE = (f"**A smoke run (`--quick`)**: the first {QUICK['n_train']} training, {QUICK['n_val']} validation and "
              f"{QUICK['n_test']} test rows of one split, every model capped at "
              + ", ".join(f"{k} = {v}" for k, v in QUICK["common"].items())
              + ". It shows that every row runs; its numbers say nothing about the models' quality.\n")


def _load(name: str, seed: int, root, split):
    split = split(name, seed) if callable(split) else split
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


def _cpu_model() -> str:
    """The CPU's model name (BLAS speed and float32 accuracy differ between Intel and AMD)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def device_name(device=None) -> str:
    """The GPU's name when ``device`` is a CUDA device (None: the first GPU if there is one), else "cpu": where the
    models of a run compute, not what the machine has (a CPU run on a GPU machine is a CPU run)."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(device)
    except RuntimeError as e:
        raise InputError(f"unknown device {device!r} ({e}); use 'cpu' or 'cuda' (or 'cuda:N')") from None
    return torch.cuda.get_device_name(device) if device.type == "cuda" and torch.cuda.is_available() else "cpu"


def environment(device=None) -> dict:
    """Library versions, threads, machine, the device the run computes on (``device_name``), the git commit and
    the command of this process."""
    import gpytorch
    import scipy
    import sklearn
    from neuralgp import __version__
    return {"neuralgp": __version__, "torch": torch.__version__, "gpytorch": gpytorch.__version__,
            "numpy": np.__version__, "scipy": scipy.__version__, "sklearn": sklearn.__version__,
            "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
            "machine": f"{platform.machine()} {platform.node()}", "cpu": _cpu_model(),
            "device": device_name(device),
            "commit": source_commit(), "command": shlex.join(["neuralgp", *sys.argv[1:]])}


def write_timing(out, name: str, run, keys=("commit", "command")) -> dict:
    """``run()``'s result stamped with ``keys`` of ``environment()`` taken before it ran (the commit is the code
    that ran, even if the tree changes during a long run) and, when ``out`` is given, written atomically to
    ``OUT/NAME.json``; returns the result."""
    from neuralgp.io import write_atomic
    env = environment()
    result = run()
    result.update({k: v for k, v in env.items() if k in keys})
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        write_atomic(Path(out) / f"{name}.json", lambda tmp: Path(tmp).write_text(json.dumps(result, indent=2) + "\n"))
    return result


def read_records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_suite(suite: Suite, out, seeds=None, dataset_names=None, model_names=None, quick: bool = False,
              budget_s: float | None = None, device: str = "cpu", root=None, verbose: bool = True,
              report_only: bool = False, depth: int | None = None, max_memory_gb: float | None = None) -> Path:
    """Run the missing (model, dataset, seed) jobs of a suite, then write ``table.md`` and the plot.

    ``report_only`` runs nothing and rewrites the report from the records already in ``out``. ``depth``
    sets the network depth of every model that has one (default: each model's own), ``max_memory_gb`` the memory
    budget of every model that has one (a larger device's). Each record holds the model's scalar parameters.
    """
    name = suite.name
    budget_s = suite.budget_s if budget_s is None else budget_s
    def seeds_of(dataset):
        if seeds is not None:
            return seeds
        if quick:
            return [0]
        return suite.seeds(dataset) if callable(suite.seeds) else suite.seeds

    dataset_names = dataset_names or (suite.quick_datasets if quick else suite.datasets)
    model_names = model_names or (suite.quick_models if quick and suite.quick_models else list(suite.models))
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
    env = environment(device)
    jobs = [] if report_only else [(d, s, m) for d in dataset_names for s in seeds_of(d) for m in model_names
                                   if (m, d, s, quick) not in done and (suite.runs is None or suite.runs(m, d))]
    twin_of = {m: t for m, t in suite.gaussian_twins.items() if m in suite.models and t in suite.models}
    coming = {(d, s, twin_of[m]) for d, s, m in jobs if m in twin_of and (twin_of[m], d, s, quick) not in done}
    jobs = [job for job in jobs if job not in coming]
    common = {"verbose": False, "max_time": budget_s, "device": device, **suite.model_params,
              **(QUICK["common"] if quick else {}), **({} if depth is None else {"depth": depth}),
              **({} if max_memory_gb is None else {"max_memory_gb": max_memory_gb})}
    loaded = {}
    for dataset, seed, model_name in tqdm(jobs, desc=name, unit="run", disable=not verbose):
        if (dataset, seed) not in loaded:
            loaded = {(dataset, seed): _subsample(_load(dataset, seed, root, suite.split), quick)}
        ds = loaded[(dataset, seed)]
        record = {"suite": name, "model": model_name, "dataset": dataset, "split": ds.split, "seed": seed,
                  "quick": quick, "budget_s": budget_s, **env}
        model = suite.models[model_name]({**common, "seed": seed}, len(ds.y_train))
        if quick:  # a smoke run: the caps hold for a row that fixes its own (the paper's 400 SVGP steps, say)
            params = model.get_params()
            model.set_params(**{k: min(params[k], cap) for k, cap in QUICK["common"].items()
                                if type(params.get(k)) in (int, float)})
        record["params"] = {k: v for k, v in model.get_params().items()
                            if v is None or isinstance(v, (bool, int, float, str))}
        _reset_peak_memory()
        started, twin = time.perf_counter(), None
        try:
            if suite.task == "classification":
                metrics = evaluate_classification(model, ds)
            else:
                metrics = evaluate_regression(model, ds, recalibrate=suite.recalibrate,
                                              merge_validation=model_name in suite.merge_validation,
                                              gaussian_twin=(dataset, seed, twin_of.get(model_name)) in coming)
            twin = metrics.pop("gaussian_twin", None)
            record.update(metrics, status="time-capped" if metrics["out_of_time"] else "ok")
        except ResourceLimitError as exc:
            record.update(status="skipped: memory", reason=str(exc))
        except (InputError, FloatingPointError, RuntimeError, torch.cuda.OutOfMemoryError) as exc:
            # InputError: this split is data the model refuses (one target value, say); the other splits go on
            record.update(status="failed", reason=f"{type(exc).__name__}: {str(exc)[:300]}")
        record.update(wall_seconds=time.perf_counter() - started, peak_memory_mb=_peak_memory_mb())
        lines = [record]
        if twin is not None:  # the same fit under the Gaussian: the twin row's record
            lines.append({**record, **twin, "model": twin_of[model_name], "gaussian_twin_of": model_name,
                          "params": {**record["params"], "predictive": "gaussian"}})
        with open(results, "a") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in lines)
    records = [r for r in read_records(results) if r["quick"] == quick]
    report, draw = suite.report
    table = report(suite, records)
    if quick:  # after the title line
        title, _, rest = table.partition("\n")
        table = f"{title}\n\n{QUICK_NOTE}\n{rest}"
    (out / "table.md").write_text(table + "\n")
    draw(suite, records, out / "metrics.png")
    return out



"""The deep-kernel-machine paper: Table 1 (test RMSE of "kernel hyper", "features" and the DKM objective after 10
solver iterations, 20 splits of four small UCI sets) with our exact GP and DBK beside, and Figure 1 (objective
and test RMSE against wall-clock, the solver against Adam at several learning rates)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from neuralgp import datasets
from neuralgp.bench.report import METRICS, pyplot
from neuralgp.bench.runner import Suite, environment
from neuralgp.datasets.scaling import Scaler
from neuralgp.dkm.prediction import predict
from neuralgp.dkm.solver import fit_dkm
from neuralgp.errors import ParameterError
from neuralgp.io import write_atomic
from neuralgp.metrics import rmse
from neuralgp.models import DKMRegressor
from neuralgp.registry import factory

SETS = ["gal/bostonHousing", "gal/concrete", "gal/energy", "gal/yacht"]
PAPER_TABLE1 = {  # dataset -> row -> (test RMSE,) after 10 solver iterations; ± two paired standard errors
    "gal/bostonHousing": {"kernel hyper": ("2.79 ± 0.10",), "features": ("2.80 ± 0.08",), "DKM": ("**2.67**",)},
    "gal/concrete": {"kernel hyper": ("5.47 ± 0.10",), "features": ("5.43 ± 0.11",), "DKM": ("**5.17**",)},
    "gal/energy": {"kernel hyper": ("0.54 ± 0.01",), "features": ("0.48 ± 0.02",), "DKM": ("**0.47**",)},
    "gal/yacht": {"kernel hyper": ("0.80 ± 0.07",), "features": ("**0.55**",), "DKM": ("0.56 ± 0.04",)},
}
PAPER_PROTOCOL = dict(validation_fraction=0.0)  # all training rows, no recalibration
# DKM's defaults until 2026-12-07, for the rows without "(input metric)" in their name: G₀ = XXᵀ/d, and for the
# recalibrated ones the Gaussian predictive (the paper-protocol rows are uncalibrated, so Gaussian either way)
FORMER_DEFAULTS = dict(input_width=None, predictive="gaussian")
TABLE1_MODELS = {"kernel hyper": factory("dkm", objective="kernel_hyper", **PAPER_PROTOCOL, **FORMER_DEFAULTS),
                 "features": factory("dkm", objective="features", **PAPER_PROTOCOL),
                 "DKM": factory("dkm", **PAPER_PROTOCOL, **FORMER_DEFAULTS),
                 "DKM (recalibrated)": factory("dkm", refit=False, **FORMER_DEFAULTS),
                 # an option: docs/methods/dkm.md, "Refit"
                 "DKM (recalibrated; refit)": factory("dkm", refit=True, **FORMER_DEFAULTS),
                 # the width the training-fold study of 2026-11-28 favours (docs/methods/dkm.md); not the default
                 "DKM (widths 100)": factory("dkm", widths=(100, 100), **PAPER_PROTOCOL, **FORMER_DEFAULTS),
                 "DKM (recalibrated; widths 100)": factory("dkm", widths=(100, 100), refit=False, **FORMER_DEFAULTS),
                 # 3 sweeps, then joint trust-region Newton iterations (docs/methods/dkm.md); not the default
                 "DKM (joint)": factory("dkm", solver="joint", **PAPER_PROTOCOL),
                 # App. F's learned input metric at ν_Ω = d (the default), chosen on the training folds
                 # (docs/methods/dkm.md)
                 "DKM (input metric)": factory("dkm", input_width="auto", **PAPER_PROTOCOL),
                 "kernel hyper (input metric)": factory("dkm", objective="kernel_hyper", input_width="auto",
                                                        **PAPER_PROTOCOL),  # its control: the metric alone
                 # the default but for the Gram kernel: the ReLU arc-cosine kernel (an option; docs/methods/dkm.md)
                 "DKM (arc-cosine)": factory("dkm", kernel="arccos", input_width="auto", **PAPER_PROTOCOL),
                 "exact GP": factory("gp"), "DBK": factory("dbk")}

# Figure 1: the solver's sweeps against Adam on the same objective (Grams and θ), per split
# Adam: the paper's named rate on everything, and rates for the Grams with θ at 0.1 (one rate for both cannot move θ
# without wrecking the ill-conditioned Grams: docs/methods/dkm.md); name -> (Gram rate, θ rate)
ADAM_RATES = {"Adam 0.01": (1e-2, 1e-2), "Adam 1e-4, θ 0.1": (1e-4, 0.1), "Adam 1e-5, θ 0.1": (1e-5, 0.1),
              "Adam 1e-6, θ 0.1": (1e-6, 0.1)}
ADAM_STEPS = 1500
SOLVER_ITERATIONS = 30
GAPS = (10.0, 1.0)  # nats below the best ℒ of any run: the solver's and each Adam run's seconds to get there
CONVERGENCE_SPLITS = {"gal/yacht": [0, 1], "gal/bostonHousing": [0, 1]}


def convergence_run(dataset: str, split: int, root=None, adam_steps: int = ADAM_STEPS,
                    solver_iterations: int = SOLVER_ITERATIONS) -> dict:
    """ℒ and test RMSE (data units) against solver seconds for the Newton solver ("solver"), the joint Newton
    iterations ("joint", ``fit_dkm(solver="joint")``, as many iterations) and Adam at each of ``ADAM_RATES``, from
    the same initialisation; the time spent scoring the test set is not counted."""
    ds = datasets.load(dataset, split=f"gal:{split}", root=root)
    X, y = np.vstack([ds.X_train, ds.X_val]), np.concatenate([ds.y_train, ds.y_val])
    x_scaler, y_scaler = Scaler("standard").fit(X), Scaler("standard").fit(y[:, None])  # as DKMRegressor's fit
    # without the input metric, which Adam and the joint iterations do not learn
    obj = DKMRegressor(input_width=None)._objective(x_scaler.transform(X), y_scaler.transform(y[:, None])[:, 0])
    Xt = x_scaler.transform(ds.X_test)
    scale, shift = y_scaler.scale_[0], y_scaler.shift_[0]
    runs = {}

    def run(name, **kw):
        trace = {"objective": [], "seconds": [], "rmse": []}

        def progress(log, theta, grams):
            mean = predict(obj, theta, grams, Xt)[0][:, 0].numpy() * scale + shift
            trace["rmse"].append(rmse(ds.y_test, mean))
        _, _, log = fit_dkm(obj, progress=progress, **kw)
        trace.update(objective=log.objective, seconds=log.seconds)
        runs[name] = trace
    run("solver", solver="newton", max_iter=solver_iterations)
    run("joint", solver="joint", max_iter=solver_iterations)
    for name, (lr, hyper_lr) in ADAM_RATES.items():
        run(name, solver="adam", max_iter=adam_steps, lr=lr, hyper_lr=hyper_lr)
    return {"dataset": dataset, "split": split, "P": len(y), "runs": runs, **summarise(runs)}


def summarise(runs: dict) -> dict:
    """The issue's targets: solver iterations to a 1e-3-nat gap (the optimum taken as the best ℒ any run reached;
    the joint iterations' too, where the run has them), and the solver's time to reach Adam's best ℒ against the
    time Adam took to get there; and every run's seconds to come within each of ``GAPS`` nats of that optimum
    (None: never)."""
    best = max(max(r["objective"]) for r in runs.values())
    solver = runs["solver"]

    def iterations_to_gap(trace):
        return next((i for i, v in enumerate(trace["objective"]) if best - v < 1e-3), None)
    gap_iterations = iterations_to_gap(solver)
    adam = {k: r for k, r in runs.items() if k.startswith("Adam")}
    adam_name = max(adam, key=lambda k: max(adam[k]["objective"]))
    adam_best = max(adam[adam_name]["objective"])
    adam_seconds = adam[adam_name]["seconds"][int(np.argmax(adam[adam_name]["objective"]))]
    reach = next((s for v, s in zip(solver["objective"], solver["seconds"]) if v >= adam_best), None)
    to_gap = {f"{gap:g}": {k: next((s for v, s in zip(r["objective"], r["seconds"]) if best - v <= gap), None)
                           for k, r in runs.items()} for gap in GAPS}
    return {"best_objective": best, "iterations_to_1e-3": gap_iterations,
            "joint_iterations_to_1e-3": iterations_to_gap(runs["joint"]) if "joint" in runs else None,
            "best_adam": adam_name,
            "adam_best_objective": adam_best, "adam_seconds_to_best": adam_seconds,
            "solver_seconds_to_adam_best": reach,
            "speedup": None if reach in (None, 0) else adam_seconds / reach, "seconds_to_gap": to_gap}


def format_convergence(res: dict) -> str:
    lines = ["dkm-convergence: per split, solver iterations to within 1e-3 nats of the best objective any run "
             "reached; the solver's seconds to Adam's best objective against Adam's"]
    for r in res["runs"]:
        s = summarise(r["runs"])  # from the traces: records written before a summary field existed read the same
        reach, speedup = s["solver_seconds_to_adam_best"], s["speedup"]
        rmse_trace = r["runs"]["solver"]["rmse"]
        joint = r["runs"].get("joint")
        joint_text = "" if joint is None else \
            f" (joint: {s['joint_iterations_to_1e-3']}, final test RMSE {joint['rmse'][-1]:.3f})"
        lines.append(f"  {r['dataset']} split {r['split']} (P = {r['P']}): iterations to 1e-3: "
                     f"{s['iterations_to_1e-3']}{joint_text}; best Adam ({s['best_adam']}) "
                     f"{s['adam_best_objective']:.3f} in "
                     f"{s['adam_seconds_to_best']:.1f} s, solver there in "
                     f"{'never' if reach is None else f'{reach:.1f} s'} "
                     f"(speed-up {'–' if speedup is None else f'{speedup:.1f}×'}); final test RMSE solver "
                     f"{rmse_trace[-1]:.3f}, after 10 iterations {rmse_trace[min(10, len(rmse_trace) - 1)]:.3f}")
        for gap, seconds in s["seconds_to_gap"].items():
            lines.append(f"    seconds to within {gap} nats of the best: " + ", ".join(
                f"{k} {'never' if v is None else f'{v:.1f}'}" for k, v in seconds.items()))
    return "\n".join(lines)


def convergence_figure(res: dict, path: Path):
    plt = pyplot()
    runs = res["runs"]
    fig, axes = plt.subplots(2, len(runs), figsize=(4.2 * len(runs), 6.4), squeeze=False)
    for j, r in enumerate(runs):
        for name, trace in r["runs"].items():
            t = np.maximum(trace["seconds"], 1e-3)
            style = {"solver": dict(color="k", lw=2), "joint": dict(color="k", lw=2, ls="--")}.get(name, dict(lw=1))
            gap = r["best_objective"] - np.array(trace["objective"]) + 1e-3  # + 1e-3 keeps the best point on a log axis
            axes[0, j].plot(t, gap, label=name, **style)
            axes[1, j].plot(t, trace["rmse"], label=name, **style)
        axes[0, j].set(xscale="log", yscale="log", title=f"{r['dataset']} split {r['split']}",
                       ylabel="best ℒ − ℒ (nats) + 1e-3")
        axes[1, j].set(xscale="log", xlabel="seconds", ylabel="test RMSE")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    write_atomic(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    plt.close(fig)


@dataclass
class ConvergenceSuite:
    """``dkm-convergence``: ``run`` writes ``OUT/dkm-convergence.json`` and ``OUT/dkm-convergence.png``."""

    name: str = "dkm-convergence"

    def run(self, out, root=None, datasets=None, **_) -> dict:
        """One split at a time, the JSON rewritten after each: a stopped run resumes from the splits it finished
        (kept only when they ran with the same Adam settings and solvers); ``datasets``: only these of
        ``CONVERGENCE_SPLITS`` (the figure shows every split in the JSON)."""
        unknown = set(datasets or ()) - set(CONVERGENCE_SPLITS)
        if unknown:
            raise ParameterError(f"dkm-convergence runs {', '.join(CONVERGENCE_SPLITS)}; "
                                 f"not {', '.join(sorted(unknown))}")
        out = Path(out or "benchmarks/results/dkm-convergence")
        out.mkdir(parents=True, exist_ok=True)
        path = out / "dkm-convergence.json"
        settings = json.loads(json.dumps({"adam_rates": ADAM_RATES, "adam_steps": ADAM_STEPS,  # as read back
                                          "solvers": ["newton", "joint"]}))
        done = json.loads(path.read_text()) if path.exists() else {}
        runs = done.get("runs", []) if all(done.get(k) == v for k, v in settings.items()) else []
        stamp = {k: v for k, v in environment().items() if k in ("commit", "command", "threads", "machine")}
        for dataset, splits in CONVERGENCE_SPLITS.items():
            if datasets and dataset not in datasets:
                continue
            for split in splits:
                if any(r["dataset"] == dataset and r["split"] == split for r in runs):
                    continue
                runs.append({**convergence_run(dataset, split, root), **stamp})
                result = {"runs": runs, **settings, **stamp}
                write_atomic(path, lambda tmp: Path(tmp).write_text(json.dumps(result) + "\n"))
        result = {"runs": runs, **settings, **stamp}
        convergence_figure(result, out / "dkm-convergence.png")
        return result

    format = staticmethod(format_convergence)


SUITES = [
    ConvergenceSuite(),
    Suite("dkm-table1", TABLE1_MODELS, SETS, METRICS, seeds=list(range(20)), split=lambda d, s: f"gal:{s}",
          paper=lambda d: PAPER_TABLE1.get(d, {}), quick_datasets=["gal/yacht"], budget_s=1800.0,
          # the smoke run stays under 2 min: the paper's rows, the default (with the metric) and the context rows
          quick_models=[m for m in TABLE1_MODELS if "widths 100" not in m and "refit" not in m and "joint" not in m
                        and m not in ("kernel hyper (input metric)", "DKM (arc-cosine)")],
          merge_validation=frozenset({"kernel hyper", "features", "DKM", "DKM (recalibrated)",
                                      "DKM (recalibrated; refit)", "DKM (widths 100)",
                                      "DKM (recalibrated; widths 100)", "DKM (joint)", "DKM (input metric)",
                                      "kernel hyper (input metric)", "DKM (arc-cosine)"}),
          note="Gal's 20 splits; seeds are split indices. DKM rows: widths 300, linear + squared-exponential Gram "
               "kernel (lengthscale 1 on standardised inputs), λ = 5, β = 1, 10 solver iterations with ≤ 50 L-BFGS "
               "iterations on the kernel weights and σ² after each, the Grams held in whitened coordinates (records "
               "before commit c734157: ≤ 20, the Grams held fixed; see each record's commit), trained on the "
               "training and validation parts together (the paper's protocol); 'DKM (recalibrated)' holds 10 % of "
               "them out and recalibrates its variances there (the default's fit); 'DKM (recalibrated; refit)' then "
               "refits on all of them, keeping that variance scale (refit=True); 'DKM (widths 100)' and 'DKM "
               "(recalibrated; widths 100)' are the first two at widths 100; 'DKM (joint)' is 'DKM' with "
               "solver='joint' (3 sweeps, then 7 joint Newton iterations); these rows have G₀ = XXᵀ/d "
               "(input_width=None); 'DKM (input metric)' is 'DKM' with App. F's learned input metric, "
               "input_width='auto' (ν_Ω = d; the default since 2026-12-07), and 'kernel hyper (input metric)' kernel "
               "hyper with the same metric; 'DKM (arc-cosine)' is 'DKM (input metric)' with the arc-cosine Gram "
               "kernel (kernel='arccos', Cho & Saul's order 1, one weight per application, beyond the paper); exact "
               "GP (GPyTorch) and DBK at their defaults, early-stopped on the validation part (DBK's records under "
               "the Gaussian predictive, its default before 2026-11-29). RMSE in the data's units; NLL on targets "
               "standardised by the training part. The paper's ± are two paired standard errors against the best row.",
          columns=[("rmse_original", "RMSE", 0), ("nll", "NLL", None), ("coverage_95", "95 % cov.", None),
                   ("mean_z2", "mean z²", None), ("train_seconds", "train s", None)]),
]

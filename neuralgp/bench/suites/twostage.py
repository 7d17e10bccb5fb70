"""The two-stage GPR paper: AKS against a fixed RBF kernel (Table 1), two-stage against the plain exact GP
(Table 2), subsample warm starts against full training with wall-clock times (Tables 3/4), the scalable
pipeline against GPnn, SVGP, DBK and FM-GP (Figure 4 / Table 7), and the 1-D toy of Figures 2 and 6."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from neuralgp.bench.report import METRICS, pyplot
from neuralgp.bench.runner import Suite, environment
from neuralgp.io import write_atomic
from neuralgp.metrics import coverage, nll, rmse
from neuralgp.registry import ESTIMATORS, build, factory

GAL = ["yacht", "bostonHousing", "energy", "concrete", "wine-quality-red", "kin8nm", "power-plant",
       "naval-propulsion-plant", "protein-tertiary-structure"]
DATASETS = [f"gal/{s}" for s in GAL]
NAMES = {"gal/yacht": "Yacht", "gal/bostonHousing": "Boston", "gal/energy": "Energy", "gal/concrete": "Concrete",
         "gal/wine-quality-red": "Wine", "gal/kin8nm": "Kin8nm", "gal/power-plant": "Power",
         "gal/naval-propulsion-plant": "Naval"}

# the paper's tables, verbatim (spec §6.2, §6.4, §6.5): (RMSE, NLL[, QICE]) per paper row
PAPER_TABLE1 = {  # Exact-GP (RBF) | AKS-Exact-GP
    "Yacht": (("2.12 ± 1.23", "-1.03 ± 0.15"), ("2.94 ± 1.23", "-0.91 ± 0.12")),
    "Boston": (("2.82 ± 0.70", "-0.44 ± 0.22"), ("2.87 ± 0.71", "-0.66 ± 0.03")),
    "Energy": (("1.53 ± 0.66", "-0.84 ± 0.10"), ("2.16 ± 0.25", "-0.74 ± 0.01")),
    "Concrete": (("5.30 ± 0.58", "-0.49 ± 0.13"), ("5.26 ± 0.51", "-0.58 ± 0.09")),
    "Wine": (("0.60 ± 0.05", "0.17 ± 0.83"), ("0.57 ± 0.05", "-0.60 ± 0.40")),
    "Kin8nm": (("0.07 ± 0.00", "-1.09 ± 0.58"), ("0.07 ± 0.00", "-1.15 ± 0.78")),
    "Power": (("3.64 ± 0.22", "1555 ± 11990"), ("3.52 ± 0.18", "-0.49 ± 0.79")),
    "Naval": (("0.00 ± 0.00", "2017 ± 6202"), ("0.00 ± 0.00", "1326 ± 5713")),
}
PAPER_TABLE2 = {  # Exact-GP (RBF) | Two-stage Exact-GP
    "Yacht": (("1.29 ± 0.42", "-1.15 ± 0.03", "6.37 ± 1.47"), ("0.41 ± 0.16", "-1.52 ± 0.04", "5.03 ± 1.59")),
    "Boston": (("2.77 ± 0.68", "-0.22 ± 0.05", "3.78 ± 1.00"), ("2.70 ± 0.67", "1.11 ± 1.49", "3.55 ± 0.93")),
    "Energy": (("0.89 ± 0.12", "-0.93 ± 0.03", "3.36 ± 0.94"), ("0.37 ± 0.07", "-1.51 ± 0.03", "2.24 ± 0.56")),
    "Concrete": (("5.35 ± 0.64", "-0.39 ± 0.07", "2.88 ± 0.67"), ("3.78 ± 0.58", "0.03 ± 0.50", "2.23 ± 0.57")),
    "Wine": (("0.62 ± 0.04", "0.95 ± 0.05", "13.21 ± 0.31"), ("0.60 ± 0.04", "0.67 ± 0.78", "13.2 ± 0.31")),
    "Kin8nm": (("0.07 ± 0.00", "-1.03 ± 0.21", "0.95 ± 0.24"), ("0.07 ± 0.00", "-0.15 ± 0.03", "0.94 ± 0.27")),
    "Power": (("3.75 ± 0.19", "3111 ± 16814", "1.05 ± 0.27"), ("3.23 ± 0.20", "0.06 ± 0.26", "15.63 ± 0.09")),
    "Naval": (("0.00 ± 0.00", "924.1 ± 3892", "0.97 ± 0.43"), ("0.00 ± 0.00", "-1.62 ± 0.00", "0.69 ± 0.22")),
}
PAPER_TABLE4 = {  # Exact-GP (Matérn-3/2) | SoD-Exact-GP
    "Yacht": (("1.29 ± 0.51", "-1.22 ± 0.04", "5.00 ± 0.83"), ("1.26 ± 0.50", "-1.25 ± 0.03", "5.04 ± 0.88")),
    "Boston": (("2.68 ± 0.67", "-0.55 ± 0.09", "2.76 ± 0.60"), ("2.67 ± 0.68", "-0.57 ± 0.12", "2.80 ± 0.60")),
    "Energy": (("1.41 ± 0.21", "-0.65 ± 0.24", "2.82 ± 0.67"), ("1.49 ± 0.19", "-0.67 ± 0.06", "2.94 ± 0.61")),
    "Concrete": (("5.17 ± 0.51", "-0.27 ± 0.21", "2.13 ± 0.52"), ("5.30 ± 0.46", "-0.10 ± 0.16", "2.25 ± 0.51")),
    "Wine": (("0.60 ± 0.05", "0.31 ± 0.60", "13.21 ± 0.31"), ("0.61 ± 0.04", "0.90 ± 0.12", "13.21 ± 0.31")),
    "Kin8nm": (("0.07 ± 0.00", "-1.44 ± 0.63", "0.83 ± 0.19"), ("0.07 ± 0.00", "-1.49 ± 0.55", "0.80 ± 0.19")),
    "Power": (("3.68 ± 0.22", "2.7e5 ± 1.2e6", "0.89 ± 0.19"), ("3.81 ± 0.16", "5.5e5 ± 1.6e6", "0.96 ± 0.17")),
    "Naval": (("0.00 ± 0.00", "1.6e3 ± 5.6e3", "0.65 ± 0.20"), ("0.00 ± 0.00", "9.20 ± 55.71", "0.65 ± 0.19")),
}


def _paper(table: dict, rows: tuple):
    """dataset → {our row: the paper's values}; ``rows`` gives, per paper column group, our row names."""
    def lookup(dataset: str) -> dict:
        values = table.get(NAMES.get(dataset), ())
        return {ours: v for names, v in zip(rows, values) for ours in ((names,) if isinstance(names, str) else names)}
    return lookup


def gal_split(dataset: str, seed: int) -> str:
    return f"gal:{seed}"


def gal_seeds(dataset: str) -> list[int]:
    """The paper's 20 splits (the protein set has 5)."""
    return list(range(5 if "protein" in dataset else 20))


# the paper's Exact-GP: one stage, zero prior mean on standardised y, 100 AdamW steps at lr 0.1 on all rows
def as_printed(name: str, **params):
    """A suite row of the paper's algorithms as printed: the isotropic kernel-ridge search (mean="krr"), one noise
    variance, no recalibration step, a Gaussian predictive (the library's default adds all four; the rows
    "Two-stage (LOO-recalibrated)", "Two-stage (heteroscedastic)", "Two-stage (Student-t)" and "Two-stage (ARD
    mean)" measure them). A registry entry's own presets (``twostage-nn``: the KRRNN mean) win over these."""
    paper = {"mean": "krr", "variance": "exact", "recalibrate": False, "noise": "homoscedastic",
             "predictive": "gaussian"}
    return factory(name, **(paper | ESTIMATORS[name].params | params))


# the library's steps on the paper's Algorithm 7: also the two-stage default of before 2026-11-27 (calibration rows)
KRR_EXACT = {"mean": "krr", "variance": "exact"}
EXACT_RBF = as_printed("twostage", mean=None, kernel="rbf", warm_start=None)
TWOSTAGE_NOTE = ("Gal's splits (90 % train incl. our validation part, which every row here trains on; 10 % test); "
                 "seeds are split indices. RMSE in the data's units; NLL per test point on targets standardised "
                 "by the training part (the spec's reading (a)); QICE in percent, 10 bins. Every GP: GPyTorch "
                 "ExactGP, zero mean, one isotropic lengthscale, float64 Cholesky, AdamW lr 0.1, one cosine cycle. "
                 "Sets past a model's memory budget (protein, n = 41k; max_memory_gb: the GPyTorch GP's 8 GB, "
                 "two-stage's the device's memory) are recorded as skipped.")
COLUMNS = [("rmse_original", "RMSE", 0), ("nll", "NLL", 1), ("qice", "QICE", 2), ("coverage_95", "95 % cov.", None),
           ("mean_z2", "mean z²", None), ("train_seconds", "train s", None)]

SCALABLE_MODELS = {"GPnn": factory("gpnn", n_neighbors=50), "Two-stage GPnn": as_printed("twostage-nn"),
                   "SVGP": factory("svgp"), "DBK": factory("dbk"), "FM-GP": factory("fmgp")}


# Figures 2 and 6: 30 points on [−5, 5], N(0, 1) noise, a random 80/20 split; coverage over all 30 points
TOY_FUNCTIONS = {"fig2": lambda x: 3 * x + 2 * np.sin(2 * np.pi * x),
                 "fig6": lambda x: 3 * np.abs(x) ** 1.5 + 2 * np.sin(2 * np.pi * x)}
PAPER_TOY_COVERAGE = {"fig2": {"Exact-GP": 0.50, "Two-stage": 0.9667}, "fig6": {"Exact-GP": 0.667, "Two-stage": 0.9667}}
TOY_MODELS = {"Exact-GP": dict(mean=None, kernel="rbf", warm_start=None),  # on standardised targets (our default)
              "Exact-GP (raw y)": dict(mean=None, kernel="rbf", warm_start=None, normalize_y=False),
              "Two-stage": dict(mean="krr")}  # the paper's search (on one input, ARD adds nothing)
TOY_SEEDS = 20


def toy_data(function: str, seed: int):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-5, 5, 30)
    y = TOY_FUNCTIONS[function](x) + rng.standard_normal(30)
    train = rng.permutation(30)[:24]
    return x[:, None], y, train


def twostage_toy(seeds: int = TOY_SEEDS) -> dict:
    """Both toys over ``seeds`` draws: coverage of the 95 % interval on all 30 points (the paper's count) and on
    the 6 held-out ones, test RMSE and NLL; the curves of draw 0 for the figure."""
    out = {"seeds": seeds, "functions": {}}
    grid = np.linspace(-5, 5, 200)[:, None]
    for function in TOY_FUNCTIONS:
        res = {row: {"coverage_all": [], "coverage_test": [], "rmse_test": [], "nll_test": []} for row in TOY_MODELS}
        for seed in range(seeds):
            X, y, train = toy_data(function, seed)
            test = np.setdiff1d(np.arange(30), train)
            for row, params in TOY_MODELS.items():
                model = build("twostage", seed=seed, verbose=False, recalibrate=False, predictive="gaussian",
                              **params).fit(X[train], y[train])
                mean, std = model.predict(X, return_std=True)
                r = res[row]
                r["coverage_all"].append(coverage(y, mean, std, 0.95))
                r["coverage_test"].append(coverage(y[test], mean[test], std[test], 0.95))
                r["rmse_test"].append(rmse(y[test], mean[test]))
                r["nll_test"].append(nll(y[test], mean[test], std[test]))
                if seed == 0:
                    gm, gs = model.predict(grid, return_std=True)
                    r["curve"] = {"mean": gm.tolist(), "std": gs.tolist()}
                    r["kernel"] = model.kernel_
            if seed == 0:
                out.setdefault("draw0", {})[function] = {"x": X[:, 0].tolist(), "y": y.tolist(),
                                                         "train": train.tolist()}
        out["functions"][function] = res
    out["grid"] = grid[:, 0].tolist()
    return out


def format_toy(res: dict) -> str:
    lines = [f"twostage-toy: mean over {res['seeds']} draws (the paper: one draw) — 95 % coverage on all 30 points / "
             f"on the 6 test points, test RMSE, test NLL; the paper's coverage in brackets"]
    for function, rows in res["functions"].items():
        for row, r in rows.items():
            lines.append(f"  {function} {row:16s} coverage {np.mean(r['coverage_all']):.3f} "
                         f"[{PAPER_TOY_COVERAGE[function].get(row, float('nan')):.3f}] / {np.mean(r['coverage_test']):.3f}  "
                         f"RMSE {np.mean(r['rmse_test']):.3f}  NLL {np.mean(r['nll_test']):.3f}")
    return "\n".join(lines)


def toy_figure(res: dict, path: Path):
    plt = pyplot()
    fig, axes = plt.subplots(len(TOY_FUNCTIONS), len(TOY_MODELS), figsize=(13, 6.4), sharex=True)
    grid = np.array(res["grid"])
    for i, function in enumerate(TOY_FUNCTIONS):
        d = res["draw0"][function]
        x, y, train = np.array(d["x"]), np.array(d["y"]), np.array(d["train"])
        test = np.setdiff1d(np.arange(len(x)), train)
        for j, row in enumerate(TOY_MODELS):
            ax, r = axes[i, j], res["functions"][function][row]
            mean, std = np.array(r["curve"]["mean"]), np.array(r["curve"]["std"])
            ax.fill_between(grid, mean - 1.96 * std, mean + 1.96 * std, alpha=0.25, label="95 %")
            ax.plot(grid, TOY_FUNCTIONS[function](grid), "k--", lw=1, label="true f")
            ax.plot(grid, mean, lw=1.5, label="mean")
            ax.plot(x[train], y[train], "o", ms=3, color="C3", label="train")
            ax.plot(x[test], y[test], "s", ms=4, color="C2", label="test")
            ax.set_title(f"{function}, {row} ({r['kernel']}): coverage {r['coverage_all'][0]:.2f}", fontsize=9)
    axes[0, 0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    write_atomic(path, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    plt.close(fig)


@dataclass
class ToySuite:
    """``twostage-toy``: ``run`` writes ``OUT/twostage-toy.json`` and ``OUT/twostage-toy.png``."""

    name: str = "twostage-toy"

    def run(self, out, **_) -> dict:
        result = {**twostage_toy(), **{k: v for k, v in environment().items() if k in ("commit", "command")}}
        out = Path(out or "benchmarks/results/twostage-toy")
        out.mkdir(parents=True, exist_ok=True)
        write_atomic(out / "twostage-toy.json", lambda tmp: Path(tmp).write_text(json.dumps(result) + "\n"))
        toy_figure(result, out / "twostage-toy.png")
        return result

    format = staticmethod(format_toy)


SUITES = [
    ToySuite(),
    Suite("twostage-aks", {"Exact-GP (RBF)": EXACT_RBF,
                           "AKS-Exact-GP": as_printed("twostage", mean=None, kernel="auto", warm_start=None)},
          DATASETS, METRICS, seeds=gal_seeds, split=gal_split, paper=_paper(PAPER_TABLE1,
                                                                            ("Exact-GP (RBF)", "AKS-Exact-GP")),
          quick_datasets=["gal/yacht"], budget_s=7200.0,
          note=TWOSTAGE_NOTE + " AKS: 20 farthest-point subsamples of ≤ 500 (the paper: 100).",
          columns=COLUMNS[:2] + COLUMNS[3:]),
    Suite("twostage-exact", {"Exact-GP (RBF)": EXACT_RBF, "Two-stage Exact-GP": as_printed("twostage"),
                             "Two-stage (in-sample residuals)": as_printed("twostage", residuals="in_sample"),
                             "Two-stage (RBF variance)": as_printed("twostage", kernel="rbf"),
                             "Two-stage (LOO-recalibrated)": factory("twostage", **KRR_EXACT,
                                                                      noise="homoscedastic", predictive="gaussian"),
                             "Two-stage (heteroscedastic)": factory("twostage", **KRR_EXACT, predictive="gaussian"),
                             "Two-stage (Student-t)": factory("twostage", **KRR_EXACT),
                             "Two-stage (ARD mean)": factory("twostage", mean="krr-ard", variance="exact")},
          DATASETS, METRICS, seeds=gal_seeds, split=gal_split,
          paper=_paper(PAPER_TABLE2, ("Exact-GP (RBF)", ("Two-stage Exact-GP", "Two-stage (in-sample residuals)"))),
          quick_datasets=["gal/yacht"], budget_s=7200.0,
          note=TWOSTAGE_NOTE + " 'Two-stage Exact-GP' is Algorithm 7 with our cross-fitted residuals; "
               "'LOO-recalibrated' adds the leave-one-out variance scale, which the paper has not; 'heteroscedastic' "
               "(the library default before its Student-t predictive) also scales the noise by a kernel ridge fit of "
               "the log squared residuals (beyond the paper); 'in-sample residuals' is the paper's Algorithm 7 as "
               "printed; 'RBF variance' fixes the variance GP's kernel instead of searching it; 'Student-t' (the "
               "library default until 2026-11-27) is 'heteroscedastic' with a Student-t predictive of the same mean "
               "and variance, its "
               "degrees of freedom fitted to the recalibration's held-out z-scores (beyond the paper); "
               "'ARD mean' (the library default since) is 'Student-t' with mean=\"krr-ard\" (kernel ridge's search "
               "also tries one lengthscale per input from a GP's marginal likelihood; beyond the paper); every other "
               "two-stage row keeps mean=\"krr\", the paper's isotropic search. "
               "The paper's two-stage numbers stand beside the first two. "
               "Warm start: 100 steps on "
               "200 random rows, then 10 on all (above 400 rows).",
          columns=COLUMNS),
    Suite("twostage-warmstart",
          {"Exact-GP (Matérn-3/2)": as_printed("twostage", mean=None, kernel="matern32", warm_start=None),
           "SoD-Exact-GP": as_printed("twostage", mean=None, kernel="matern32", warm_start=200),
           "Two-stage (full training)": as_printed("twostage", warm_start=None),
           "Two-stage (warm start)": as_printed("twostage", warm_start=200)},
          DATASETS, METRICS, seeds=gal_seeds, split=gal_split,
          paper=_paper(PAPER_TABLE4, ("Exact-GP (Matérn-3/2)", "SoD-Exact-GP")), quick_datasets=["gal/yacht"],
          runs=lambda m, d: d != "gal/yacht" or "warm" not in m.lower() and "SoD" not in m,  # 277 rows: no subsample
          budget_s=7200.0,
          note=TWOSTAGE_NOTE + " Our steps: 100 at lr 0.1 on all rows (full) against 100 on 200 random rows then "
               "10 on all (warm start; the paper's Table 5 setting — its Table 3 used 50 → 5 at lr 0.02 with "
               "Adam). 'variance s' is the wall-clock of the GP's training alone (the paper gave no times).",
          columns=COLUMNS[:3] + [("variance_seconds", "variance s", None), ("train_seconds", "train s", None)]),
    Suite("twostage-scalable", SCALABLE_MODELS,
          ["uci/parkinsons", "uci/bike", "uci/protein", "uci/kin40k", "uci/keggdirected"], METRICS,
          seeds=[0, 1, 2], split=lambda d, s: f"mask:{s}",
          quick_datasets=["uci/parkinsons"], budget_s=1800.0,
          note="The shared sets' fixed test masks (mask:K; seeds are mask indices), a validation part of 1/9 of "
               "the rest (GPnn recalibrates on it, DBK stops early on it, FM-GP recalibrates; the two-stage model "
               "trains on it). Metrics on standardised targets; HC/LC-RMSE: RMSE on the 10 % of test points "
               "with the smallest / largest predictive std (q = 0.1). The paper's Figure 4 has no numbers and "
               "its Poletele, Ctslice, Road3D, Song and HouseE are not in our data (parkinsons is Poletele's "
               "source with other columns). Every model at its defaults; GPnn with 50 neighbours (Table 7). DBK's "
               "and FM-GP's records are of their Gaussian predictive (their defaults before 2026-11-29 and -28).",
          columns=[("hc_rmse", "HC-RMSE", None), ("lc_rmse", "LC-RMSE", None), ("rmse", "RMSE", None),
                   ("nll", "NLL", None), ("coverage_95", "95 % cov.", None), ("train_seconds", "train s", None)]),
]

"""Pooled calibration of regressors over data sets: the rule, the table and the reliability plot.

The test points of every split run on a set are pooled. A model is **calibrated** on a set when the pooled 95 %
coverage lies in [0.90, 0.98] or within 2.6 binomial standard errors of 0.95 for the pooled test size (whichever
is wider), and the pooled mean z² lies in [0.7, 1.5]. Sets whose pooled test size is under ``MIN_POOLED_TEST``
are shown but not counted: a few dozen points cannot tell.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import numpy as np

from neuralgp.bench.evaluate import RELIABILITY_LEVELS
from neuralgp.bench.report import commits, pyplot, run_on

COVERAGE_BAND = (0.90, 0.98)
Z2_BAND = (0.7, 1.5)
MIN_POOLED_TEST = 50
SIGNAL_RMSE = 0.9  # a set has learnable signal when some model's RMSE (standardised) is below this
MEAN_PREDICTOR_RMSE = 0.95  # ... and then every model should beat the mean predictor by this much


def coverage_band(n_test: int) -> tuple[float, float]:
    """The accepted pooled 95 % coverage for ``n_test`` pooled test points."""
    se = math.sqrt(0.95 * 0.05 / n_test)
    return min(COVERAGE_BAND[0], 0.95 - 2.6 * se), max(COVERAGE_BAND[1], 0.95 + 2.6 * se)


def finished(records: list[dict]) -> list[dict]:
    """The records of runs that finished with metrics (not skipped or failed)."""
    return [r for r in records if "coverage_95" in r]


def pooled(records: list[dict]) -> dict | None:
    """Pooled coverage and mean z² (weighted by test size), mean RMSE/NLL/CRPS/time over the splits that ran."""
    ok = finished(records)
    if not ok:
        return None
    n = sum(r["n_test"] for r in ok)
    w = [r["n_test"] / n for r in ok]
    levels = np.sum([wi * np.asarray(r["coverage_levels"]) for wi, r in zip(w, ok)], axis=0)
    return {"splits": len(ok), "n_test": n, "coverage_95": sum(wi * r["coverage_95"] for wi, r in zip(w, ok)),
            "mean_z2": sum(wi * r["mean_z2"] for wi, r in zip(w, ok)), "levels": levels,
            **{k: statistics.mean(r[k] for r in ok) for k in ("rmse", "nll", "crps", "train_seconds")},
            "time_capped": any(r["status"] == "time-capped" for r in ok)}


def calibrated(p: dict) -> bool:
    lo, hi = coverage_band(p["n_test"])
    return lo <= p["coverage_95"] <= hi and Z2_BAND[0] <= p["mean_z2"] <= Z2_BAND[1]


def metric_by_split(records: list[dict], key: str = "nll") -> dict:
    """{(set, model): {split: the metric ``key``}} of the runs that finished."""
    out = {}
    for r in finished(records):
        out.setdefault((r["dataset"], r["model"]), {})[r["split"]] = r[key]
    return out


def beats_mean_predictor(rmses: dict, dataset: str, model: str) -> bool | None:
    """Whether ``model`` beats the mean predictor on ``dataset`` (mean RMSE over its splits < MEAN_PREDICTOR_RMSE)
    where the set has learnable signal on those splits: some model that ran all of them reaches a mean RMSE below
    SIGNAL_RMSE over them (``rmses`` from ``metric_by_split(records, "rmse")``). None without signal there. Judged
    like for like: a row run on split 0 alone is not held to a signal that only other splits show."""
    mine = rmses.get((dataset, model), {})
    if not mine:
        return None
    splits = mine.keys()
    signal = any(statistics.mean(v[s] for s in splits) < SIGNAL_RMSE
                 for (d, _), v in rmses.items() if d == dataset and splits <= v.keys())
    return statistics.mean(mine.values()) < MEAN_PREDICTOR_RMSE if signal else None


def nll_at_most_baselines(nlls: dict, dataset: str, model: str, baselines) -> bool | None:
    """Whether ``model``'s NLL on ``dataset`` is at most every baseline's, each compared like for like: the mean
    NLL over the splits both ran (``nlls`` from ``metric_by_split``). None when no baseline shares a split with it."""
    mine = nlls.get((dataset, model), {})
    verdicts = []
    for b in baselines:
        theirs = nlls.get((dataset, b), {})
        common = sorted(mine.keys() & theirs.keys())
        if common:
            verdicts.append(statistics.mean(mine[s] for s in common) <= statistics.mean(theirs[s] for s in common))
    return all(verdicts) if verdicts else None


def _grid(suite, records) -> tuple[list, list, dict]:
    """(sets, models, {(set, model): pooled or None})."""
    sets = [d for d in suite.datasets if any(r["dataset"] == d for r in records)]
    models = [m for m in suite.models if any(r["model"] == m for r in records)]
    cells = {(d, m): pooled([r for r in records if r["dataset"] == d and r["model"] == m]) for d in sets
             for m in models}
    return sets, models, cells


def calibration_table(suite, records: list[dict]) -> str:
    sets, models, cells = _grid(suite, records)
    ours, baselines = suite.groups
    ran = {d: [cells[d, m] for m in models if cells[d, m]] for d in sets}
    n_test = {d: max((p["n_test"] for p in ran[d]), default=0) for d in sets}
    counted = [d for d in sets if n_test[d] >= MIN_POOLED_TEST]
    nlls, rmses = metric_by_split(records), metric_by_split(records, "rmse")
    lines = [f"# {suite.name}: are the defaults honest about their uncertainty?", "", suite.note, "",
             f"Calibrated (✓) = pooled 95 % coverage in [{COVERAGE_BAND[0]}, {COVERAGE_BAND[1]}] or within 2.6 "
             f"binomial standard errors of 0.95 for the pooled test size (whichever is wider), and pooled mean z² "
             f"in [{Z2_BAND[0]}, {Z2_BAND[1]}]. Sets with fewer than {MIN_POOLED_TEST} pooled test points are shown "
             f"but not counted ({', '.join(d for d in sets if d not in counted) or 'none'}). Metrics on targets "
             "standardised by the training part; RMSE, NLL, CRPS and time are means over splits.", "",
             "## Summary", "",
             f"Sets counted: {len(counted)}. 'NLL ≤ best baseline': sets where the row's NLL is at most every "
             "GPyTorch and scikit-learn baseline's, each compared on the splits both ran (mean NLL over those; out "
             "of the counted sets where some baseline shares a split with the row; the per-set NLL table below "
             f"averages each row's own splits). 'beats mean': mean RMSE < {MEAN_PREDICTOR_RMSE} on the counted sets "
             f"where some model reaches a mean RMSE < {SIGNAL_RMSE} on the splits the row ran (learnable signal "
             "there).", "",
             "| model | calibrated | NLL ≤ best baseline | beats mean | median train s | sets run | splits per set "
             "| run on | code |",
             "|---|---|---|---|---|---|---|---|---|"]
    for m in models:
        run = [d for d in sets if cells[d, m]]
        cal = [d for d in counted if cells[d, m] and calibrated(cells[d, m])]
        ran_counted = [d for d in counted if cells[d, m]]
        verdicts = {d: nll_at_most_baselines(nlls, d, m, baselines) for d in ran_counted}
        compared = [d for d in ran_counted if verdicts[d] is not None]
        beat = [d for d in compared if verdicts[d]]
        beats = [beats_mean_predictor(rmses, d, m) for d in ran_counted]
        secs = [cells[d, m]["train_seconds"] for d in run]
        rs = [r for r in records if r["model"] == m]
        splits = sorted({cells[d, m]["splits"] for d in run})
        span = "–" if not splits else f"{splits[0]}" if len(splits) == 1 else f"{splits[0]}–{splits[-1]}"
        lines.append(f"| {m} | {len(cal)}/{len(ran_counted)} | "
                     f"{f'{len(beat)}/{len(compared)}' if m in ours else '–'} | "
                     f"{sum(b is True for b in beats)}/{sum(b is not None for b in beats)} | "
                     f"{statistics.median(secs) if secs else float('nan'):.1f} | {len(run)}/{len(sets)} | "
                     f"{span} | {run_on(rs)} | {commits(rs)} |")
    for title, key, fmt in (("95 % coverage (pooled; ✓ = calibrated, ✗ = not)", "coverage_95", ".2f"),
                            ("mean z² (pooled)", "mean_z2", ".2f"), ("NLL", "nll", ".3f"), ("RMSE", "rmse", ".3f"),
                            ("CRPS", "crps", ".3f"), ("train seconds", "train_seconds", ".1f")):
        lines += ["", f"## {title}", "", "| set | test pts | " + " | ".join(models) + " |",
                  "|---|---|" + "---|" * len(models)]
        for d in sets:
            row = []
            for m in models:
                p = cells[d, m]
                if p is None:
                    status = sorted({r["status"] for r in records if r["dataset"] == d and r["model"] == m})
                    row.append(", ".join(status) or "–")
                    continue
                cell = f"{p[key]:{fmt}}" + (" †" if p["time_capped"] else "")
                if key == "coverage_95" and d in counted:
                    cell += " ✓" if calibrated(p) else " ✗"
                row.append(cell)
            lines.append(f"| {d} | {n_test[d]} | " + " | ".join(row) + " |")
    lines += ["", "† = some splits hit the time budget (the best state so far was used); 'skipped: memory' / "
              "'failed' give their reason in results.jsonl."]
    return "\n".join(lines)


def reliability_plot(suite, records: list[dict], path: Path):
    """Per model: observed against nominal coverage of central intervals, one thin line per set, all sets pooled
    in bold; the diagonal is perfect calibration."""
    sets, models, cells = _grid(suite, records)
    if not models:
        return
    plt = pyplot()
    cols = min(4, len(models))
    rows = math.ceil(len(models) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.2 * rows), squeeze=False)
    nominal = np.asarray(RELIABILITY_LEVELS)
    for ax, m in zip(axes.flat, models):
        ps = [cells[d, m] for d in sets if cells[d, m]]
        for p in ps:
            ax.plot(nominal, p["levels"], color="0.6", lw=0.7, alpha=0.7)
        if ps:
            n = sum(p["n_test"] for p in ps)
            ax.plot(nominal, sum(p["levels"] * p["n_test"] for p in ps) / n, color="C3", lw=2.2, label="all sets")
        ax.plot([0, 1], [0, 1], "k--", lw=0.8)
        ax.set(xlim=(0, 1), ylim=(0, 1), title=f"{m} ({len(ps)} sets)")
        ax.title.set_fontsize(9)
    for ax in list(axes.flat)[len(models):]:
        ax.axis("off")
    fig.supxlabel("nominal coverage of the central interval")
    fig.supylabel("observed coverage (test points pooled)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


CALIBRATION = (calibration_table, reliability_plot)

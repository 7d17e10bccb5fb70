"""Report writers of benchmark suites: Markdown tables with the papers' numbers beside ours, and plots.

A suite names its pair in ``Suite.report``: ``GROUPED`` (the DBK paper's Table 1 layout), ``SCALING`` (cost
against n) or ``METRICS`` (one column per metric of ``Suite.columns``).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the runner imports this module
    from neuralgp.bench.runner import Suite


def pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def mean_std(values, fmt: str = ".4f", sep: str = " (", end: str = ")") -> str:
    """"mean (std)" over seeds ("–" for none, the value alone for one); ``sep``/``end`` give other layouts."""
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:{fmt}}"
    return f"{statistics.mean(values):{fmt}}{sep}{statistics.stdev(values):{fmt}}{end}"


def run_on(records: list[dict]) -> str:
    """Where and under which budget the runs of a row ran, e.g. 'cpu, 1 thread, 120 s'."""
    where = set()
    for r in records:
        device, threads = r.get("device", "cpu").replace("NVIDIA ", ""), r.get("threads")
        if device == "cpu" and threads:
            device += f", {threads} thread" + ("s" if threads != 1 else "")
        budget = r.get("budget_s")
        where.add(f"{device}, {budget:.0f} s" if budget else f"{device}, no cap")
    return "; ".join(sorted(where))


def commits(records: list[dict]) -> str:
    """The commits that made the records (short hashes; "unknown" for records older than the field)."""
    def short(commit: str) -> str:
        return commit[:7] + ("+dirty" if commit.endswith("+dirty") else "")
    return ", ".join(sorted({short(r.get("commit", "unknown")) for r in records}))


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
                  "| status | run on | code |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for group in suite.groups:
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
                    cells += [f"**{mean_std(vals)}**" if bold else mean_std(vals), p[i]]
                secs = [x["train_seconds"] for x in ok[m]]
                peak = [x["peak_memory_mb"] for x in rs if x.get("peak_memory_mb")]
                statuses = sorted({x["status"] for x in rs})
                mark = " †" if "time-capped" in statuses else ""
                its = [x["iterations"] for x in ok[m]]
                cells += [f"{statistics.mean(secs):.1f}" if secs else "–", p[3],
                          f"{statistics.mean(its):.0f}" if its else "–",
                          f"{max(peak):.0f}" if peak else "–", ", ".join(statuses), run_on(rs), commits(rs)]
                lines.append(f"| {m}{mark} | {len(ok[m])}/{len(rs)} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def plot(suite: Suite, records: list[dict], path: Path):
    """RMSE and NLL per model and dataset (mean ± std over seeds), paper values as black ticks."""
    plt = pyplot()
    sets = [d for d in suite.datasets if any(r["dataset"] == d and "rmse" in r for r in records)]
    if not sets:
        return
    models = [m for m in [m for g in suite.groups for m in g] if any(r["model"] == m for r in records)]
    fig, axes = plt.subplots(2, len(sets), figsize=(5 * len(sets), 7), squeeze=False)
    for j, dataset in enumerate(sets):
        paper = suite.paper(dataset) if suite.paper else {}
        for i, (key, col) in enumerate((("rmse", 1), ("nll", 2))):
            ax = axes[i, j]
            for x, m in enumerate(models):
                vals = [r[key] for r in records if r["dataset"] == dataset and r["model"] == m and key in r]
                if vals:
                    ax.bar(x, np.mean(vals), yerr=np.std(vals), color=f"C{next(i for i, g in enumerate(suite.groups) if m in g)}")
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
                     mean_std([r["rmse"] for r in ok]), mean_std([r["nll"] for r in ok])]
        else:
            cells = ["–", "–", "–", f"{peak:.0f}" if peak else "–", "–", "–"]
        mark = " †" if "time-capped" in statuses else ""
        lines.append(f"| {n:.0e} | {model}{mark} | {len(ok)}/{len(rs)} | " + " | ".join(cells)
                     + f" | {', '.join(statuses)} |")
    return "\n".join(lines)


def scaling_plot(suite: Suite, records: list[dict], path: Path):
    """Log-log seconds per iteration and peak memory against n (the paper's Figure 3, with memory)."""
    plt = pyplot()
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


# columns whose best value is a target, not the lowest
TARGET_VALUES = {"mean_z2": 1.0, "coverage_50": 0.5, "coverage_90": 0.9, "coverage_95": 0.95}
COUNTS = {"n_parameters"}  # shown as the distinct values over seeds, not ranked


def metric_table(suite: Suite, records: list[dict]) -> str:
    """Per dataset: one row per model, mean ± std over seeds of each of ``suite.columns``, the paper beside."""
    lines = [f"# {suite.name}: ours beside the paper's (p.) numbers", "", suite.note, "",
             "Mean ± std over seeds; **bold** = our best of the column (lower is better; mean z²: closest to 1; "
             "coverage: closest to its level); † = some seeds hit the time budget; 'skipped'/'failed' rows give the "
             "reason in results.jsonl.", ""]
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
                vals = [r[key] for r in ok[m] if r.get(key) is not None]
                if key in COUNTS:
                    cells.append(" / ".join(f"{v:,}" for v in sorted(set(vals))) or "–")
                else:
                    target = TARGET_VALUES.get(key)
                    badness = (lambda v: v) if target is None else (lambda v, t=target: abs(v - t))
                    means = {mm: badness(statistics.mean(vs)) for mm, o in ok.items()
                             if (vs := [r[key] for r in o if r.get(key) is not None])}
                    cell = mean_std(vals, ".4g", " ± ", "")
                    cells.append(f"**{cell}**" if vals and means[m] == min(means.values()) and len(means) > 1
                                 else cell)
                if paper_idx is not None:
                    p = paper.get(m)
                    cells.append(p[paper_idx] if p and len(p) > paper_idx else "–")
            lines.append("| " + " | ".join(cells + [", ".join(sorted({r["status"] for r in rs}))]) + " |")
        lines.append("")
    return "\n".join(lines)


def metric_plot(suite: Suite, records: list[dict], path: Path):
    """The first two metrics of the suite per model and dataset (mean ± std over seeds)."""
    plt = pyplot()
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


GROUPED = (table, plot)
SCALING = (scaling_table, scaling_plot)
METRICS = (metric_table, metric_plot)

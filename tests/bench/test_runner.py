"""The benchmark harness: records, resume, table with the paper's numbers, plot."""

import json

import pytest
import torch

from neuralgp.bench.runner import Suite, read_records, run_suite
from neuralgp.bench.suites import SUITES
from neuralgp.bench.suites.dbk import TABLE1_MODELS, TWINS
from neuralgp.cli import main
from neuralgp.errors import InputError


def test_quick_suite_records_resumes_and_tabulates(tmp_path):
    out = run_suite(SUITES["dbk-table1"], tmp_path, dataset_names=["uci/pol"], model_names=["DBK", "SVGP", "sGP"],
                    quick=True, verbose=False, depth=1)
    records = read_records(out / "results.jsonl")
    # the default DBK's Student-t fit is also scored as the Gaussian of the same mean and variance: its twin row
    assert [r["model"] for r in records] == ["DBK", "DBK (Gaussian)", "SVGP", "sGP"]
    assert records[1]["rmse"] == records[0]["rmse"] and records[1]["params"]["predictive"] == "gaussian"
    assert records[0]["params"]["depth"] == 1 and records[0]["params"]["rank"] == 128  # what ran is on record
    # DBK: the depth-1 ResNet on pol's 26 inputs to r = 128 features (input layer, one block, output layer), the
    # feature scale and the noise; no q(w) in exact inference
    assert records[0]["n_parameters"] == 26 * 128 + 128 + 2 * (128 * 128 + 128) + 2
    for r in records:
        assert r["status"] in ("ok", "time-capped") and r["quick"] and r["n_train"] == 300
        for key in ("rmse", "nll", "train_seconds", "peak_memory_mb", "torch", "gpytorch", "threads", "machine", "commit",
                    "command"):
            assert key in r
    run_suite(SUITES["dbk-table1"], tmp_path, dataset_names=["uci/pol"], model_names=["DBK", "SVGP", "sGP"],
              quick=True, verbose=False)
    assert len(read_records(out / "results.jsonl")) == 4  # nothing ran twice
    table = (out / "table.md").read_text()
    assert "| DBK | 1/1 |" in table and "0.0583 (0.0018)" in table  # the paper's DBK RMSE on pol beside ours
    assert (out / "metrics.png").stat().st_size > 5000
    assert "1800 s |" in table  # each row says where it ran and under which budget
    assert table.splitlines()[2].startswith("**A smoke run (`--quick`)**") and "max_epochs = 2" in table


def test_report_only_rewrites_the_table_from_merged_records(tmp_path):
    record = {"suite": "dbk-table1", "model": "SVGP", "dataset": "uci/pol", "seed": 3, "quick": False,
              "status": "time-capped", "rmse": 0.2, "mae": 0.1, "nll": 0.3, "train_seconds": 120.0,
              "iterations": 40, "peak_memory_mb": 500.0, "device": "cpu", "threads": 1, "budget_s": 120.0,
              "commit": "0123456789abcdef"}
    with pytest.raises(InputError, match="no records"):
        run_suite(SUITES["dbk-table1"], tmp_path / "none", report_only=True, verbose=False)
    assert not (tmp_path / "none").exists()  # nothing written
    (tmp_path / "results.jsonl").write_text(json.dumps(record) + "\n")
    run_suite(SUITES["dbk-table1"], tmp_path, report_only=True, verbose=False)
    assert len(read_records(tmp_path / "results.jsonl")) == 1  # nothing ran
    table = (tmp_path / "table.md").read_text()
    assert "smoke run" not in table  # only quick records carry the warning
    row = next(line for line in table.splitlines() if line.startswith("| SVGP"))
    assert row.startswith("| SVGP † | 1/1 | **0.1000** |") and "| 40 |" in row and row.endswith("| cpu, 1 thread, 120 s | 0123456 |")


def test_cli_quick_has_all_fourteen_paper_rows(tmp_path, capsys):
    paper_rows = [m for m in TABLE1_MODELS if m != "DBK (paper corr.)" and m not in TWINS.values()]
    assert len(paper_rows) == 14
    assert main(["bench", "dbk-table1", "--quick", "--datasets", "uci/pol", "--out", str(tmp_path)]) == 0
    table = capsys.readouterr().out
    for row in TABLE1_MODELS:  # the paper's rows, ours and the Gaussian twins of the default DBK and SVDBK
        assert f"| {row} " in table
    assert json.loads((tmp_path / "results.jsonl").read_text().splitlines()[0])["suite"] == "dbk-table1"


def test_scaling_quick_suite(tmp_path):
    out = run_suite(SUITES["dbk-scaling"], tmp_path, model_names=["DBK", "GP"], quick=True, verbose=False)
    table = (out / "table.md").read_text()
    assert "| 1e+02 | DBK |" in table and "| 1e+03 | GP |" in table
    assert all(r["peak_memory_mb"] > 0 for r in read_records(out / "results.jsonl"))
    assert (out / "metrics.png").stat().st_size > 5000


def test_fmgp_quick_suites_recalibrate_and_show_the_paper(tmp_path):
    out = run_suite(SUITES["fmgp-regression"], tmp_path / "reg", model_names=["FM-GP", "Var"], quick=True, verbose=False)
    records = read_records(out / "results.jsonl")
    assert {r["model"] for r in records} == {"FM-GP", "Var"}
    for r in records:
        assert r["status"] == "ok" and r["split"] == "holdout:1000:1000"
        assert r["variance_scale"] != 1.0 and r["predict_seconds_per_point"] > 0
    table = (out / "table.md").read_text()
    assert "0.0207 ± 0.003" in table and "| FM-GP | 1/1 |" in table  # the paper's Poletele MSE beside ours
    out = run_suite(SUITES["fmgp-classification"], tmp_path / "cls", quick=True, verbose=False)
    records = read_records(out / "results.jsonl")
    assert all(r["status"] == "ok" and 0 <= r["error"] <= 1 and r["temperature"] > 0 for r in records)
    assert "0.122 ± 0.016" in (out / "table.md").read_text()


def test_metric_table_bolds_the_coverage_closest_to_its_level(tmp_path):
    """Lower is better for errors; for coverage and mean z² the best is the nominal value, not the lowest."""
    base = {"suite": "dkm-table1", "dataset": "gal/yacht", "seed": 0, "quick": False, "status": "ok",
            "device": "cpu", "threads": 1, "budget_s": 60.0, "commit": "0123456"}
    rows = [("DKM", 0.5, 0.62, 3.0), ("kernel hyper", 0.4, 0.93, 1.2), ("features", 0.9, 0.99, 0.5)]
    (tmp_path / "results.jsonl").write_text("".join(
        json.dumps({**base, "model": m, "rmse_original": e, "coverage_95": c, "mean_z2": z, "nll": e,
                    "train_seconds": 1 + e}) + "\n" for m, e, c, z in rows))
    run_suite(SUITES["dkm-table1"], tmp_path, report_only=True, verbose=False)
    lines = (tmp_path / "table.md").read_text().splitlines()
    row = {m: next(line for line in lines if line.startswith(f"| {m} |")) for m, *_ in rows}
    assert "**0.93**" in row["kernel hyper"] and "**0.4**" in row["kernel hyper"] and "**1.2**" in row["kernel hyper"]
    assert "**" not in row["DKM"] and "**" not in row["features"].replace("**0.55**", "")  # the paper's bold cell


def test_parameter_counts_are_recorded_and_shown_unranked(tmp_path):
    """dak-classification's 'parameters' column: each row's count from its records (old records without one: –),
    never bold; the metric columns still rank."""
    base = {"suite": "dak-classification", "dataset": "uci_classification/magic", "quick": False, "status": "ok",
            "device": "cpu", "threads": 1, "budget_s": 60.0, "commit": "0123456", "nll": 0.3, "ece": 0.02,
            "train_seconds": 1.0, "seconds_per_iteration": 0.01}
    records = [{**base, "model": "DAK", "seed": s, "error": 0.12, "n_parameters": 11666} for s in (0, 1)]
    records += [{**base, "model": "NN", "seed": 0, "error": 0.10, "n_parameters": 1234},
                {**base, "model": "SVGP", "seed": 0, "error": 0.13}]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    run_suite(SUITES["dak-classification"], tmp_path, report_only=True, verbose=False)
    lines = (tmp_path / "table.md").read_text().splitlines()
    header = next(line for line in lines if line.startswith("| model |")).split(" | ")
    row = {m: next(line for line in lines if line.startswith(f"| {m} |")).split(" | ") for m in ("DAK", "NN", "SVGP")}
    col = header.index("parameters")
    assert (row["DAK"][col], row["NN"][col], row["SVGP"][col]) == ("11,666", "1,234", "–")
    assert row["NN"][header.index("error")] == "**0.1**"


def test_epoch_ratio_marks_rows_timed_in_another_run_and_skips_another_cpu():
    from neuralgp.bench.suites.dak import table2

    def rec(model, s_per_epoch, commit, cpu="cpu A"):
        return {"suite": "dak-table2", "model": model, "dataset": "uci/gas", "seed": 0, "status": "ok",
                "rmse": 0.3, "seconds_per_iteration": s_per_epoch, "commit": commit, "cpu": cpu}

    records = [rec("NN", 0.01, "aaa"), rec("DAK-CF", 0.015, "aaa"), rec("NN+SVGP", 0.04, "bbb"),
               rec("SV-DKL", 0.2, "aaa", cpu="cpu B")]
    ratios = table2(SUITES["dak-table2"], records).split("## Time per epoch")[1]
    assert "| uci/gas | 1.50× | – | 4.00× * | – † |" in ratios and "timed in another run" in ratios
    assert "another CPU model" in ratios
    same_run = table2(SUITES["dak-table2"], records[:2]).split("## Time per epoch")[1]
    assert "| uci/gas | 1.50× | – | – | – |" in same_run and "timed in another run" not in same_run
    assert "another CPU model" not in same_run


def test_a_split_the_model_refuses_is_recorded_as_failed_and_the_job_goes_on(tmp_path):
    from neuralgp.bench.calibration import CALIBRATION
    from neuralgp.bench.runner import Suite
    from neuralgp.models.sklearn_gp import SklearnGPRegressor
    from neuralgp.registry import factory

    class RefusesSeedZero(SklearnGPRegressor):
        def fit(self, X, y, *args, **kwargs):
            if self.seed == 0:
                raise InputError("y is constant in this split")
            return super().fit(X, y, *args, **kwargs)

    suite = Suite("refusal", {"GP": factory(RefusesSeedZero)}, ["synthetic/step1d@60"], CALIBRATION, seeds=[0, 1],
                  groups=[["GP"], []])
    records = read_records(run_suite(suite, tmp_path, verbose=False) / "results.jsonl")
    assert [(r["seed"], r["status"]) for r in records] == [(0, "failed"), (1, "ok")]
    assert "y is constant" in records[0]["reason"]


def test_records_name_the_device_the_models_ran_on_not_the_machines_gpu():
    from neuralgp.bench.runner import device_name, environment
    assert device_name("cpu") == environment("cpu")["device"] == "cpu"  # a CPU run on a GPU machine is a CPU run
    if torch.cuda.is_available():
        assert device_name("cuda") == torch.cuda.get_device_name(0)
    with pytest.raises(InputError, match="unknown device 'gpu'"):
        device_name("gpu")


def test_max_memory_gb_reaches_every_model_that_has_one(tmp_path):
    out = run_suite(SUITES["twostage-exact"], tmp_path, dataset_names=["gal/yacht"],
                    model_names=["Exact-GP (RBF)", "Two-stage Exact-GP"], seeds=[0], verbose=False,
                    max_memory_gb=1e-6)
    records = read_records(out / "results.jsonl")
    assert [r["status"] for r in records] == ["skipped: memory"] * 2
    assert all(r["params"]["max_memory_gb"] == 1e-6 and "max_memory_gb" in r["reason"] for r in records)
    with pytest.raises(SystemExit):
        main(["bench", "twostage-exact", "--max-memory-gb", "0", "--out", str(tmp_path)])


def test_row_and_dataset_names_can_be_named_on_the_command_line():
    """`neuralgp bench --models / --datasets` split their value on commas: a name with one cannot be run alone."""
    for suite in SUITES.values():
        if isinstance(suite, Suite):
            named = [*suite.models, *suite.datasets]
            assert not [n for n in named if "," in n], suite.name


def test_a_gaussian_twin_scores_its_rows_fit_as_the_gaussian_model_would(tmp_path):
    from neuralgp.bench.calibration import CALIBRATION
    from neuralgp.registry import factory

    small = {"max_epochs": 30, "max_iter": 30, "eval_every": 10}
    suite = Suite("twins", {"t": factory("dak", predictive="student_t", **small),
                            "Gaussian": factory("dak", predictive="gaussian", **small)},
                  ["synthetic/step1d@200"], CALIBRATION, seeds=[0], groups=[["t", "Gaussian"], []],
                  gaussian_twins={"t": "Gaussian"})
    records = read_records(run_suite(suite, tmp_path / "both", verbose=False) / "results.jsonl")
    t, twin = records  # one fit, two records: the twin did not run by itself
    assert (t["model"], twin["model"], twin["gaussian_twin_of"]) == ("t", "Gaussian", "t")
    assert t["predictive_df"] > 0 and twin["predictive_df"] is None and twin["params"]["predictive"] == "gaussian"
    assert twin["rmse"] == t["rmse"] and twin["mean_z2"] == t["mean_z2"] and twin["nll"] != t["nll"]
    alone, = read_records(run_suite(suite, tmp_path / "alone", model_names=["Gaussian"], verbose=False)
                          / "results.jsonl")  # without its row the twin is fitted by itself: the same numbers
    for key in ("rmse", "nll", "coverage_95", "mean_z2", "crps", "coverage_levels", "variance_scale"):
        assert alone[key] == pytest.approx(twin[key], rel=1e-9), key

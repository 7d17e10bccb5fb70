"""The command line, end to end on small data."""

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from neuralgp.bench.suites.dbk import dbk_speed, format_speed
from neuralgp.cli import main


def run(*args):
    return subprocess.run([sys.executable, "-m", "neuralgp.cli", *args], capture_output=True, text=True)


def test_fit_json_save_and_predict(tmp_path):
    out = tmp_path / "run"
    res = run("fit", "--dataset", "uci/yacht", "--model", "dbk", "--max-iter", "60", "--rank", "16",
              "--gram-precision", "float32", "--depth", "3", "--json", "--quiet", "--out", str(out),
              "--param", "recalibration=validation")  # not the 5 refits that cross-fit 24 held-out rows
    assert res.returncode == 0, res.stderr
    metrics = json.loads(res.stdout)
    assert metrics["params"]["training_gram_precision"] == "float32" and metrics["params"]["depth"] == 3
    assert metrics["estimator"] == "DBKRegressor" and metrics["params"]["normalize_features"] is True
    for key in ("mae", "rmse", "nll", "crps", "coverage_95", "train_seconds", "iterations"):
        assert key in metrics
    assert metrics["iterations"] == 60 and metrics["n_train"] == 216
    inputs = tmp_path / "x.csv"
    np.savetxt(inputs, np.random.default_rng(0).uniform(0, 1, (7, 6)), delimiter=",", header="a,b,c,d,e,f",
               comments="")
    pred = run("predict", str(out / "model.pt"), str(inputs), "--output", str(tmp_path / "p.csv"))
    assert pred.returncode == 0, pred.stderr
    lines = (tmp_path / "p.csv").read_text().splitlines()
    assert lines[0] == "mean,std" and len(lines) == 8 and all(float(v.split(",")[1]) > 0 for v in lines[1:])


def test_fit_help_lists_every_registry_name():
    from neuralgp.registry import ESTIMATORS
    res = run("fit", "--help")
    text = re.sub(r"-\n\s+", "-", res.stdout).replace("\n", " ")  # argparse wraps lines after hyphens
    assert res.returncode == 0 and all(f"{name}:" in text for name in ESTIMATORS)


@pytest.mark.parametrize("name", ["fmgp", "gpnn", "gp", "sgpr", "svgp", "dkl", "sdkl", "svdkl", "svdkl-grid"])
def test_every_registry_name_fits_a_small_set_with_its_defaults(name, capsys):
    """yacht has 308 rows: no default (split, inducing points, neighbours, subsets) may assume more."""
    assert main(["fit", "--dataset", "uci/yacht", "--model", name, "--max-time", "1", "--json", "--quiet"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["model"] == name and result["split"] == "random" and result["rmse"] < 1.5


def test_json_output_stays_parseable_while_progress_is_shown(capsys):
    """Progress goes to stderr: `neuralgp fit … --json` without --quiet pipes into a JSON reader."""
    assert main(["fit", "--dataset", "uci/yacht", "--model", "dkm", "--param", "max_iter=2", "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["estimator"] == "DKMRegressor" and "DKM iteration 2" in out.err


def test_param_sets_any_constructor_parameter(capsys):
    assert main(["fit", "--dataset", "uci/yacht", "--model", "svgp", "--param", "num_inducing=16",
                 "--param", "base_kernel=matern32", "--max-epochs", "2", "--json", "--quiet"]) == 0
    params = json.loads(capsys.readouterr().out)["params"]
    assert params["num_inducing"] == 16 and params["base_kernel"] == "matern32"


def test_svdbk_fit_and_text_output(capsys):
    assert main(["fit", "--dataset", "uci/yacht", "--model", "svdbk", "--max-epochs", "3", "--rank", "8",
                 "--quiet"]) == 0
    assert "coverage_95" in capsys.readouterr().out


@pytest.mark.parametrize("args,message", [
    (["fit", "--dataset", "uci/nonexistent"], "uci set 'nonexistent' not found"),
    (["fit", "--dataset", "uci_classification/magic"], "model 'dbk' has no classification estimator"),
    (["fit", "--dataset", "uci/yacht", "--model", "nngp"], "invalid choice: 'nngp'"),
    (["fit", "--dataset", "uci/yacht", "--param", "num_inducing"], "write NAME=VALUE"),
    (["predict", "missing.pt", "x.csv", "--output", "o.csv"], "model file missing.pt does not exist"),
    (["fit", "--dataset", "uci/yacht", "--no-correction", "--paper-correction"], "exclude each other"),
    (["fit", "--dataset", "uci/yacht", "--model", "fmgp", "--gram-precision", "mixed"],
     "fmgp (FMGPRegressor) has no parameter training_gram_precision; its parameters are"),
    (["fit", "--dataset", "uci/yacht", "--model", "gpnn", "--depth", "3"], "gpnn (GPnnRegressor) has no parameter depth"),
    (["fit", "--dataset", "uci/yacht", "--depth", "0"], "--depth: must be an integer >= 1, got '0'"),
    (["fit", "--dataset", "uci/yacht", "--rank", "x"], "--rank: must be an integer >= 1, got 'x'"),
    (["bench", "dbk-table1", "--quick", "--depth", "-1"], "--depth: must be an integer >= 1, got '-1'"),
])
def test_errors_are_one_line_without_traceback(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    try:
        code = main(args)
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_the_installed_command_exits_2_with_one_line(tmp_path):
    """The same through the real entry point (a new process): exit status, stderr, nothing written."""
    res = subprocess.run([sys.executable, "-m", "neuralgp.cli", "fit", "--dataset", "uci/nonexistent"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 2
    assert "uci set 'nonexistent' not found" in res.stderr and "Traceback" not in res.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_warning_is_one_line_naming_the_command(tmp_path, capsys):
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(7, 2))
    np.savetxt(tmp_path / "tiny.csv", np.c_[X, X[:, 0]], delimiter=",", header="a,b,y", comments="")
    assert main(["fit", "--dataset", str(tmp_path / "tiny.csv"), "--max-iter", "20", "--quiet"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert [line for line in err if "UserWarning" in line] == [
        line for line in err if line.startswith("neuralgp fit: UserWarning: DBKRegressor's predictive variances were "
                                                "not recalibrated: its validation part has 1 row ")]
    assert any("UserWarning" in line for line in err) and not any(".py:" in line for line in err)


def test_predict_with_wrong_feature_count_writes_nothing(tmp_path):
    assert main(["fit", "--dataset", "uci/yacht", "--max-iter", "5", "--rank", "4", "--quiet",
                 "--out", str(tmp_path / "m")]) == 0
    bad = tmp_path / "bad.csv"
    bad.write_text("1,2\n3,4\n")
    res = run("predict", str(tmp_path / "m" / "model.pt"), str(bad), "--output", str(tmp_path / "o.csv"))
    assert res.returncode == 2 and "2 features, but DBKRegressor is expecting 6 features" in res.stderr
    assert not (tmp_path / "o.csv").exists()


def test_datasets_command(capsys):
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    assert "uci/pol" in out and "1000" in out and "uci/protein                                  45730    9  no" in out


def test_demo_smoke(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path), "--n", "100", "--max-iter", "30", "--quiet"]) == 0
    assert (tmp_path / "step1d.png").stat().st_size > 10000
    table = (tmp_path / "metrics.md").read_text()
    assert table.count("| DBK") == 3 and "test RMSE" in capsys.readouterr().out


def test_speed_benchmark_runs():
    res = dbk_speed(dataset="uci/yacht", blocks=7, steps_per_block=5)  # medians: one slow step must not flip a check
    assert res["dbk_ms"] > 0 and res["plain_ms"] > 0 and res["ratio"] == res["dbk_ms"] / res["plain_ms"]
    for p in ("float64", "mixed", "float32"):
        assert res["ratio_by_precision"][p] == res["dbk_ms_by_precision"][p] / res["plain_ms"]
        assert 0 < res["gp_head_ms_by_precision"][p] < res["dbk_ms_by_precision"][p]
    assert res["dbk_ms"] == res["dbk_ms_by_precision"][res["default_precision"]]
    assert "GP head alone" in format_speed(res) and "<- default" in format_speed(res)

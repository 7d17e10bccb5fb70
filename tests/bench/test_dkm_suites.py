"""The DKM paper's suites: Table 1 quick run with the paper's numbers beside, and the convergence measurement."""

import pytest

from neuralgp.bench.runner import read_records, run_suite
from neuralgp.bench.suites import SUITES
from neuralgp.bench.suites.dkm import ADAM_RATES, ConvergenceSuite, convergence_run, format_convergence, summarise
from neuralgp.errors import ParameterError


def test_quick_table1_rows_and_paper_numbers(tmp_path):
    out = run_suite(SUITES["dkm-table1"], tmp_path, model_names=["kernel hyper", "DKM"], quick=True, verbose=False)
    records = read_records(out / "results.jsonl")
    assert all(r["status"] == "ok" and r["split"] == "gal:0" and r["iterations"] == 10 for r in records)
    assert {r["params"]["objective"] for r in records} == {"kernel_hyper", "dkm"}
    table = (out / "table.md").read_text()
    assert "0.80 ± 0.07" in table and "0.56 ± 0.04" in table  # the paper's yacht row


def test_summary_counts_iterations_to_the_gap_and_the_speed_up():
    runs = {"solver": {"objective": [-10.0, -2.0, -1.0005, -1.0], "seconds": [0.0, 1.0, 2.0, 3.0]},
            "Adam 0.01": {"objective": [-10.0, -5.0, -1.5], "seconds": [0.0, 10.0, 40.0]}}
    s = summarise(runs)
    assert s["iterations_to_1e-3"] == 2 and s["best_adam"] == "Adam 0.01"
    assert s["solver_seconds_to_adam_best"] == 2.0 and s["speedup"] == pytest.approx(20.0)
    assert s["seconds_to_gap"]["10"] == {"solver": 0.0, "Adam 0.01": 0.0}  # both start 9 nats below the best
    assert s["seconds_to_gap"]["1"] == {"solver": 1.0, "Adam 0.01": 40.0}
    runs["Adam 0.01"]["objective"][-1] = -3.0
    assert summarise(runs)["seconds_to_gap"]["1"]["Adam 0.01"] is None  # never within 1 nat
    assert s["joint_iterations_to_1e-3"] is None
    runs["joint"] = {"objective": [-10.0, -0.5], "seconds": [0.0, 5.0]}  # joint ends higher: the best moves
    s = summarise(runs)
    assert s["joint_iterations_to_1e-3"] == 1 and s["iterations_to_1e-3"] is None and s["best_adam"] == "Adam 0.01"


def test_convergence_run_traces_objective_and_rmse():
    res = convergence_run("gal/yacht", 0, adam_steps=3, solver_iterations=4)
    assert set(res["runs"]) == {"solver", "joint", *ADAM_RATES}
    for name in ("solver", "joint"):  # the joint run: 3 sweeps (the solver's own first three), then 1 iteration
        trace = res["runs"][name]
        assert len(trace["objective"]) == len(trace["rmse"]) == len(trace["seconds"]) == 5
        assert trace["objective"][-1] > trace["objective"][0]
    assert res["runs"]["joint"]["objective"][:4] == pytest.approx(res["runs"]["solver"]["objective"][:4], rel=1e-12)
    assert "gal/yacht split 0" in format_convergence({"runs": [res]})


def test_convergence_suite_names_its_sets_when_given_another(tmp_path):
    with pytest.raises(ParameterError, match="gal/yacht, gal/bostonHousing; not uci/wine"):
        ConvergenceSuite().run(tmp_path / "out", datasets=["uci/wine"])
    assert not (tmp_path / "out").exists()  # nothing written

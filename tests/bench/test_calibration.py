"""The calibration suite: the pooled rule, the quick run on toy sets (both fitting modes), table and plot."""

import math

import pytest

from neuralgp.bench.calibration import (beats_mean_predictor, calibrated, coverage_band, nll_at_most_baselines,
                                        metric_by_split, pooled)
from neuralgp.bench.runner import read_records, run_suite
from neuralgp.bench.suites import SUITES
from neuralgp.bench.suites.calibration import DATASETS, splits_of


def _record(cov, z2, n, **extra):
    return {"coverage_95": cov, "mean_z2": z2, "n_test": n, "coverage_levels": [cov] * 10, "rmse": 0.5, "nll": 1.0,
            "crps": 0.3, "train_seconds": 1.0, "status": "ok", **extra}


def test_coverage_band_widens_for_few_points_and_is_fixed_for_many():
    assert coverage_band(10_000) == (0.90, 0.98)
    lo, hi = coverage_band(50)
    se = math.sqrt(0.95 * 0.05 / 50)
    assert lo == pytest.approx(0.95 - 2.6 * se) and hi == pytest.approx(0.95 + 2.6 * se) and lo < 0.90


def test_pooling_weights_splits_by_test_size_and_the_rule_needs_both_coverage_and_z2():
    p = pooled([_record(1.0, 1.0, 100), _record(0.9, 2.0, 300), {"status": "failed"}])
    assert p["splits"] == 2 and p["n_test"] == 400
    assert p["coverage_95"] == pytest.approx(0.925) and p["mean_z2"] == pytest.approx(1.75)
    assert not calibrated(p)  # coverage fine, z² too large
    assert calibrated(pooled([_record(0.95, 1.0, 400)]))
    assert not calibrated(pooled([_record(0.85, 1.0, 4000)]))
    assert pooled([{"status": "skipped: memory"}]) is None


def _nll(model, split, value):
    return {**_record(0.95, 1.0, 100), "dataset": "s", "model": model, "split": split, "nll": value}


def test_nll_is_compared_with_each_baseline_on_the_splits_both_ran():
    # ours: 1.0 on a hard split 0, 0.0 on split 1; the baseline ran split 0 only, at 0.9. Each row's mean over its
    # own splits (0.5 against 0.9) would say ours is better; on the split both ran it is worse
    records = [_nll("ours", "0", 1.0), _nll("ours", "1", 0.0), _nll("base", "0", 0.9), {"status": "failed"}]
    nlls = metric_by_split(records)
    assert nlls[("s", "ours")] == {"0": 1.0, "1": 0.0}
    assert nll_at_most_baselines(nlls, "s", "ours", ["base"]) is False
    records.append(_nll("base", "1", 0.5))  # both splits: 0.5 against 0.7; a second baseline shares no split
    records.append(_nll("other", "7", -9.0))
    assert nll_at_most_baselines(metric_by_split(records), "s", "ours", ["base", "other"]) is True
    assert nll_at_most_baselines(metric_by_split(records), "s", "ours", ["other"]) is None
    records[-2] = _nll("base", "1", -0.5)  # 0.5 against 0.2
    assert nll_at_most_baselines(metric_by_split(records), "s", "ours", ["base", "other"]) is False


def test_beating_the_mean_predictor_is_judged_where_the_set_has_signal_on_the_rows_own_splits():
    # "ours" ran splits 0-2 with RMSE 0.8 / 0.7 / 1.0; the baseline split 0 alone at 1.0, where nobody reaches 0.9
    def rec(model, split, rmse):
        return {**_nll(model, split, 0.0), "rmse": rmse}
    records = [rec("ours", "0", 1.0), rec("ours", "1", 0.7), rec("ours", "2", 0.8), rec("base", "0", 1.0)]
    rmses = metric_by_split(records, "rmse")
    assert beats_mean_predictor(rmses, "s", "ours") is True  # 0.83 < 0.9: signal on its own splits, and beaten
    assert beats_mean_predictor(rmses, "s", "base") is None  # split 0: no model below 0.9 there
    records.append(rec("other", "0", 0.85))  # now split 0 shows signal, and the baseline does not beat the mean
    assert beats_mean_predictor(metric_by_split(records, "rmse"), "s", "base") is False
    assert beats_mean_predictor(metric_by_split(records, "rmse"), "s", "missing") is None


def test_the_suite_covers_every_shared_set_with_more_splits_for_small_ones():
    assert len(DATASETS) == 33 and len(set(DATASETS)) == 33
    assert splits_of("uci/servo") == list(range(10)) and splits_of("uci/pol") == [0]
    assert splits_of("gal/concrete") == list(range(20))


def test_quick_calibration_run_has_both_fitting_modes_table_and_plot(tmp_path):
    rows = ["DBK", "DBK (plain fit)", "sklearn GP", "SVGP"]
    out = run_suite(SUITES["calibration"], tmp_path, dataset_names=["uci/yacht", "gal/yacht"], model_names=rows,
                    quick=True, verbose=False)
    records = read_records(out / "results.jsonl")  # and the DBK rows' Gaussian twins, from the same fits
    assert len(records) == 12 and {r["split"] for r in records} == {"mask:0", "gal:0"}
    assert {r["model"] for r in records} == {*rows, "DBK (Gaussian)", "DBK (plain fit; Gaussian)"}
    for r in records:
        assert r["status"] == "ok" and len(r["coverage_levels"]) == 10 and 0 < r["mean_z2"] < 100
    plain = [r for r in records if r["model"] == "DBK (plain fit)"][0]
    assert plain["variance_scale"] != 1.0  # plain fit held out a validation part and recalibrated on it
    table = (out / "table.md").read_text()
    assert "## Summary" in table and "| DBK (plain fit) |" in table and "## 95 % coverage" in table
    assert (out / "metrics.png").stat().st_size > 5000


def test_each_default_has_a_gaussian_twin_on_the_same_fitting_mode():
    """A twin row is scored on its t row's fit (``Suite.gaussian_twins``): it must build the same model but for the
    predictive, and be fitted the same way (validation part or plain fit)."""
    suite = SUITES["calibration"]
    assert {"DBK", "DBK (plain fit)", "SVDBK", "FM-GP", "DAK (plain fit)"} <= suite.gaussian_twins.keys()
    for row, twin in suite.gaussian_twins.items():
        t_model, g_model = suite.models[row]({}, 100), suite.models[twin]({}, 100)
        assert t_model.predictive == "student_t" and g_model.predictive == "gaussian"
        assert {**t_model.get_params(), "predictive": None} == {**g_model.get_params(), "predictive": None}
        assert (row in suite.merge_validation) == (twin in suite.merge_validation) == ("plain fit" in row)

"""Fit a model on a ``Dataset`` split and score it the way the papers do (standardised targets)."""

from __future__ import annotations

import time

import numpy as np
import torch

from neuralgp import distributed
from neuralgp.chunking import gradient_block_rows
from neuralgp.errors import DataError
from neuralgp.metrics import classification_report, coverage, nll, regression_report, rmse


RELIABILITY_LEVELS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
DAK_PAPER_NOISE = 0.69325  # softplus(0) + 1e-4


def count_parameters(model) -> int | None:
    """Trained parameters (elements) of the fitted model's torch modules — network, kernel, likelihood, variational
    distribution — as the DAK paper's Table 4 counts them; None for a model that holds none (kernel ridge,
    scikit-learn's GP, DKM's Gram matrices)."""
    modules = [v for v in vars(model).values() if isinstance(v, torch.nn.Module)]
    if not modules:
        return None
    unique = {id(p): p for module in modules for p in module.parameters()}
    return sum(p.numel() for p in unique.values())


def _scores(ds, mean, std, df) -> dict:
    """The test metrics of predictions (mean, std) with a Gaussian (``df`` None) or Student-t predictive: on y
    standardised by the training part's mean/std, the coverage of the central intervals at ``RELIABILITY_LEVELS``,
    and in the data's own units RMSE, NLL and the DAK paper's NLPD, every variance + 0.69325 (its code's untrained
    GPyTorch likelihood; DAK spec §5.2.3), so that its Table 2 can be compared."""
    mu, sd = ds.y_train.mean(), ds.y_train.std()
    report = regression_report((ds.y_test - mu) / sd, (mean - mu) / sd, std / sd, df)
    report["coverage_levels"] = [coverage(ds.y_test, mean, std, level, df) for level in RELIABILITY_LEVELS]
    report["rmse_original"] = rmse(ds.y_test, mean)
    report["nll_original"] = nll(ds.y_test, mean, std, df)
    report["nll_plus_0693"] = nll(ds.y_test, mean, np.sqrt(std ** 2 + DAK_PAPER_NOISE), df)
    return {k: (float(v) if isinstance(v, np.floating) else v) for k, v in report.items()}


def evaluate_regression(model, ds, recalibrate: bool = False, merge_validation: bool = False,
                        gaussian_twin: bool = False) -> dict:
    """Fit on train with the validation part (early stopping, or recalibration for FM-GP / GPnn) — or, with
    ``merge_validation``, by plain ``fit(X, y)`` on train and validation together — predict test; metrics on y
    standardised by the training part's mean/std (the same in both modes).

    Returns the metric dict plus the coverage of the central intervals at ``RELIABILITY_LEVELS``, timings,
    iterations and the fitted noise on the standardised scale. With ``gaussian_twin`` and a Student-t predictive,
    also ``"gaussian_twin"``: the same predictions' metrics under the Gaussian of the same mean and variance (what
    the model with ``predictive="gaussian"`` predicts after the same fit: the t's shape is fitted after training).
    """
    t0 = time.perf_counter()
    # in a process group each worker fits on its own part of the training (and validation) rows, cut in whole
    # gradient blocks so that exact fits with 1 and W workers sum the same blocks (blockwise_exact_backward)
    own = lambda *arrays: [a[distributed.shard(len(a), gradient_block_rows(len(a)))] for a in arrays]  # noqa: E731
    if merge_validation:
        model.fit(*own(np.vstack([ds.X_train, ds.X_val]), np.concatenate([ds.y_train, ds.y_val])))
    else:
        model.fit(*own(ds.X_train, ds.y_train), *own(ds.X_val, ds.y_val))
    if recalibrate:  # FM-GP's protocol for every model (a no-op for FM-GP and GPnn, recalibrated in fit)
        model.recalibrate(*own(ds.X_val, ds.y_val))
    train_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    mean, std = model.predict(ds.X_test, return_std=True)
    predict_seconds = time.perf_counter() - t0
    df = getattr(model, "predictive_df", None)  # a Student-t predictive's degrees of freedom; None: Gaussian
    report = _scores(ds, mean, std, df)
    if gaussian_twin and df is not None:
        report["gaussian_twin"] = _scores(ds, mean, std, None)
    noise, sd = getattr(model, "noise_variance_", None), ds.y_train.std()
    log = getattr(model, "train_log_", None)
    report.update(train_seconds=train_seconds, predict_seconds=predict_seconds,
                  predict_seconds_per_point=predict_seconds / len(ds.y_test),
                  iterations=int(getattr(model, "n_iter_", 0)),
                  best_iteration=int(log.best_step) if log else None,
                  out_of_time=bool(log.out_of_time) if log else False,
                  seconds_per_iteration=train_seconds / max(1, int(getattr(model, "n_iter_", 0))),
                  noise_variance=None if noise is None else float(noise) / sd ** 2,
                  n_parameters=count_parameters(model),
                  variance_scale=float(getattr(model, "variance_scale", 1.0)),
                  selection_optimism=getattr(model, "selection_optimism_", None),  # the part of it due to the pick
                  n_train=len(ds.y_train), n_test=len(ds.y_test), target_scale="standardized by train mean/std")
    if getattr(model, "inference_scores_", None):  # DAK's "auto" compared inferences: each one's validation NLL
        report.update(inference=model.inference_, inference_scores=model.inference_scores_)
    if hasattr(model, "variance_used_"):  # two-stage: which pipeline "auto" fitted (by the device's memory)
        used = model.mean_used_
        report.update(mean_used=used if used is None or isinstance(used, str) else type(used).__name__,
                      variance_used=model.variance_used_)
    for stage, seconds in getattr(model, "stage_seconds_", {}).items():  # two-stage: mean, search, variance
        report[f"{stage}_seconds"] = seconds
    return {k: (float(v) if isinstance(v, np.floating) else v) for k, v in report.items()}


def evaluate_streaming(model, rows, train_rows: int, test_rows: int, seed: int = 0) -> dict:
    """Data larger than memory: the last ``test_rows`` rows of the source are the test part; the model is fitted on
    ``train_rows`` rows sampled from the rest (in a process group each worker its share, from its own shard), its
    posterior then conditioned on every training row streamed from the source (``fit_posterior``; each worker
    reads its shard), and scored on the test part (read into memory) with targets standardised by the model's
    target scaler (fitted on the sample). A model with ``bagging="auto"`` is set to 0: a bag has no one posterior
    to condition."""
    n_train = rows.n_rows - test_rows
    if test_rows < 1 or n_train < 2:
        raise DataError(f"--test-rows {test_rows} leaves no training rows of {rows.n_rows}, or no test rows")
    train, test = rows.part(0, n_train), rows.part(n_train, rows.n_rows)
    t0 = time.perf_counter()
    share = distributed.shard(min(train_rows, n_train))  # each worker samples its share from its own shard
    if model.get_params().get("bagging") == "auto":  # the posterior is one fit's: no bag on a small sample
        model.set_params(bagging=0)
    model.check_can_condition_on_rows()  # before the fit, not after it
    model.fit(*train.sample(share.stop - share.start, seed, shard=True))
    fit_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    model.fit_posterior(train)
    posterior_seconds = time.perf_counter() - t0
    X_test, y_test = (np.concatenate(parts) for parts in zip(*test.chunks(shard=False)))
    t0 = time.perf_counter()
    mean, std = model.predict(X_test, return_std=True)
    predict_seconds = time.perf_counter() - t0
    mu, sd = float(model.y_scaler_.shift_[0]), model._y_scale
    df = model.predictive_df
    report = regression_report((y_test - mu) / sd, (mean - mu) / sd, std / sd, df)
    report.update(rmse_original=rmse(y_test, mean), nll_original=nll(y_test, mean, std, df),
                  train_seconds=fit_seconds, posterior_seconds=posterior_seconds, predict_seconds=predict_seconds,
                  iterations=int(getattr(model, "n_iter_", 0)), n_sample=min(train_rows, n_train),
                  n_posterior_rows=model.n_posterior_rows_, n_test=test_rows,
                  noise_variance=float(model.noise_variance_) / sd ** 2,
                  variance_scale=float(model.variance_scale), target_scale="standardized by the sample's mean/std")
    return {k: (float(v) if isinstance(v, np.floating) else v) for k, v in report.items()}


def evaluate_classification(model, ds) -> dict:
    """Fit on train (temperature on the validation part), predict test; accuracy, error, NLL, ECE, Brier."""
    t0 = time.perf_counter()
    model.fit(ds.X_train, ds.y_train, ds.X_val, ds.y_val)
    train_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    proba = model.predict_proba(ds.X_test)
    predict_seconds = time.perf_counter() - t0
    report = classification_report(np.searchsorted(model.classes_, ds.y_test), proba)
    report.update(error=1.0 - report["accuracy"], train_seconds=train_seconds, predict_seconds=predict_seconds,
                  predict_seconds_per_point=predict_seconds / len(ds.y_test), temperature=model.temperature_,
                  iterations=int(getattr(model, "n_iter_", 0)), n_train=len(ds.y_train), n_test=len(ds.y_test),
                  seconds_per_iteration=train_seconds / max(1, int(getattr(model, "n_iter_", 0))),
                  n_parameters=count_parameters(model), out_of_time=bool(model.train_log_.out_of_time))
    return {k: (float(v) if isinstance(v, np.floating) else v) for k, v in report.items()}

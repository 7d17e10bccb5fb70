"""The estimator registry: one short name per model, its classes and preset parameters.

The CLI (``neuralgp fit --model NAME``) and every benchmark suite build their models from here, so adding a
method is one entry. A name may have a regressor, a classifier or both (``fit`` picks by the data set's task).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

from neuralgp.errors import InputError
from neuralgp.models import (DAKClassifier, DAKRegressor, DBKRegressor, DKLRegressor, DKMRegressor, ExactGPRegressor,
                             FMGPClassifier, FMGPRegressor, GPnnRegressor, GridSVDKLRegressor, NetworkClassifier,
                             NetworkRegressor, SGPRRegressor, SklearnGPRegressor, SparseDKLRegressor, SVDKLClassifier,
                             SVDKLRegressor, SVGPClassifier, SVGPRegressor, TwoStageGPRegressor)
from neuralgp.models.dak import EXACT_MAX_ROWS, SELECT_MAX_ROWS


@dataclass(frozen=True)
class Entry:
    summary: str
    regressor: type | None = None
    classifier: type | None = None
    params: dict = field(default_factory=dict)  # presets on top of the class defaults

    def estimator_class(self, task: str) -> type | None:
        return self.regressor if task == "regression" else self.classifier


def _default(cls: type, name: str):
    """A constructor parameter's default, so that a summary below never repeats a number the class defines."""
    return inspect.signature(cls.__init__).parameters[name].default


ESTIMATORS = {
    "dbk": Entry("deep basis kernel GP, exact inference in O(n r²) (DBK)", DBKRegressor),
    "svdbk": Entry("deep basis kernel GP, mini-batch weight-space SVI (SVDBK)", DBKRegressor,
                   params={"inference": "svi"}),
    "dak": Entry("deep additive kernel: additive 1-D GPs on grids as a Bayesian last layer; the exact posterior up "
                 f"to {EXACT_MAX_ROWS} training rows; up to {SELECT_MAX_ROWS} both it and the closed-form ELBO, the "
                 "one of lower validation NLL kept; the closed form above (classification: Monte Carlo softmax)",
                 DAKRegressor, DAKClassifier),
    "dak-cf": Entry("deep additive kernel, closed-form ELBO at any size (DAK-CF, the paper's)", DAKRegressor,
                    params={"inference": "closed_form"}),
    "dak-mc": Entry("deep additive kernel, Monte Carlo ELBO (DAK-MC)", DAKRegressor, params={"inference": "mc"}),
    "dak-exact": Entry("deep additive kernel, exact posterior over the last layer by the marginal likelihood",
                       DAKRegressor, params={"inference": "exact"}),
    "dkm": Entry("deep kernel machine: learned Gram matrices, Riccati / Lyapunov solver "
                 f"(n ≤ {_default(DKMRegressor, 'max_train_size')})", DKMRegressor),
    "fmgp": Entry("neural feature-map GP, exact, recalibrated on the validation part (FM-GP)", FMGPRegressor,
                  FMGPClassifier),
    "gpnn": Entry("nearest-neighbour exact GPs, recalibrated on the validation part (GPnn)", GPnnRegressor),
    "gp": Entry("GPyTorch exact GP, RBF-ARD kernel", ExactGPRegressor),
    "sgpr": Entry("GPyTorch sparse GP, Titsias' collapsed bound, "
                  f"{_default(SGPRRegressor, 'num_inducing')} inducing points", SGPRRegressor),
    "svgp": Entry("GPyTorch stochastic variational GP, mini-batches, "
                  f"{_default(SVGPRegressor, 'num_inducing')} inducing points", SVGPRegressor, SVGPClassifier),
    "dkl": Entry("GPyTorch deep kernel learning, exact GP on 2 network features", DKLRegressor),
    "sdkl": Entry("GPyTorch deep kernel learning with the SGPR bound", SparseDKLRegressor),
    "svdkl": Entry("GPyTorch deep kernel learning with SVGP (classification: DAK's network, one SVGP per class, "
                   "softmax likelihood)", SVDKLRegressor, SVDKLClassifier),
    "svdkl-grid": Entry("GPyTorch SV-DKL as in the DAK paper: 16 network outputs, a 1-D grid (KISS-GP) variational "
                        "GP on each, mixed linearly", GridSVDKLRegressor),
    "twostage": Entry("two-stage GP: kernel-ridge mean (ARD candidates), exact GP variance on cross-fitted residuals, "
                      "kernel search, subsample warm start, heteroscedastic noise, variances recalibrated by held-out "
                      "z², Student-t predictive; past the device's memory the scalable pipeline of twostage-nn",
                      TwoStageGPRegressor),
    "twostage-nn": Entry("scalable two-stage GP: kernel ridge on "
                         f"{_default(TwoStageGPRegressor, 'n_neighbors')} nearest neighbours (KRRNN) mean, GPnn "
                         "variance on leave-one-out residuals, kernel search, variances recalibrated by leave-one-out "
                         "z²",
                         TwoStageGPRegressor,
                         params={"mean": "krrnn", "variance": "gpnn", "warm_start": None, "predictive": "gaussian"}),
    "network": Entry("plain MLP: Gaussian NLL with one learned noise (regression), cross-entropy (classification)",
                     NetworkRegressor, NetworkClassifier),
    "sklearn-gp": Entry("scikit-learn exact GP, c·RBF-ARD + white noise, "
                        f"{_default(SklearnGPRegressor, 'n_restarts_optimizer')} optimizer restarts "
                        f"(n ≤ {_default(SklearnGPRegressor, 'max_train_size')})", SklearnGPRegressor),
}


def parameter_names(cls: type) -> set[str]:
    """The constructor parameters of an estimator class."""
    return {name for name in inspect.signature(cls.__init__).parameters if name != "self"}


def estimator_class(name: str, task: str = "regression") -> type:
    if name not in ESTIMATORS:
        raise InputError(f"unknown model {name!r}; use one of {', '.join(ESTIMATORS)}")
    cls = ESTIMATORS[name].estimator_class(task)
    if cls is None:
        has = [n for n, e in ESTIMATORS.items() if e.estimator_class(task) is not None]
        raise InputError(f"model {name!r} has no {task} estimator; for {task} use one of {', '.join(has)}")
    return cls


def build(name: str, task: str = "regression", **params):
    """The estimator ``name`` for ``task`` with its presets and ``params``; a parameter the class does not take
    is an error naming the class's parameters."""
    cls = estimator_class(name, task)
    unknown = sorted(set(params) - parameter_names(cls))
    if unknown:
        raise InputError(f"{name} ({cls.__name__}) has no parameter {', '.join(unknown)}; its parameters are "
                         f"{', '.join(sorted(parameter_names(cls)))}")
    return cls(**{**ESTIMATORS[name].params, **params})


def factory(name: str | type, task: str = "regression", **fixed):
    """(shared parameters, n_train) → estimator, for benchmark suites: the registry's ``name`` (or an estimator
    class outside the registry, such as a paper's plain-network baseline); shared parameters the class does not
    take (``max_iter`` for an SVI model, say) are left out; ``fixed`` ones are the suite row's own."""
    cls = name if isinstance(name, type) else estimator_class(name, task)
    names = parameter_names(cls)

    def make(shared: dict, n_train: int):
        params = {k: v for k, v in {**shared, **fixed}.items() if k in names}
        return cls(**params) if isinstance(name, type) else build(name, task, **params)
    return make

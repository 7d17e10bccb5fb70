"""What every neuralgp regressor (and classifier) shares: input checks, scaling, predict in user units,
recalibration, save/load."""

from __future__ import annotations

import hashlib
import math
import os
import warnings

import numpy as np
import torch
from scipy.optimize import minimize_scalar
from scipy.special import roots_genlaguerre
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, clone
from tqdm.auto import tqdm

from neuralgp import distributed
from neuralgp.chunking import PREDICT_ROWS, SOFTMAX_ROWS, row_slices
from neuralgp.datasets.scaling import Scaler
from neuralgp.errors import InputError, NotFittedError, check_labels, check_X, check_X_y
from neuralgp.io import save_model
from neuralgp.metrics import LOG_2PI, nll, quantile
from neuralgp.models.calibration import fit_temperature, mc_softmax
from neuralgp.params import check_params



# fewer validation points give no usable variance scale α = mean z² (its relative standard error is about √(2/n):
# 45 % at 10 points); measured: 2 held-out points of uci/challenger gave α ≈ 1e-5 and a test NLL of 2·10⁴
MIN_RECALIBRATION_POINTS = 10


# what ``fit`` sets from the validation part besides the model itself (cleared at the start of every fit)
RECALIBRATION_STATE = ("variance_scale_", "selection_optimism_", "recalibrated_by_", "predictive_df_")


# validation parts up to this size keep every check's points for ``selection_optimism`` (above it the pick's
# optimism is negligible, and checks × points would be large)
MAX_SELECTION_POINTS = 5000


# how many standard errors of the validation mean z² ``fit`` adds to it (``recalibration_scale``); chosen among 0, ½
# and 1 on every split of the calibration suite's 21 small and medium sets for DBK, DAK and FM-GP (with a validation
# part and plain fit): ½ calibrates as many sets as any rule tried, 1 gives a lower NLL but leaves DBK
# under-confident on the medium sets (docs/methods/dbk.md, "Half a standard error on α")
RECALIBRATION_STANDARD_ERRORS = 0.5


# validation parts smaller than this (a few dozen rows: data sets under about 1000 rows at the default 10 %) are too
# few for α, whose z² are heavy-tailed: ``fit`` then cross-fits α on all the rows it was given, in this many folds
# (``NeuralGPRegressor._cross_fit_z2``; docs/methods/dbk.md, "Cross-fitted recalibration on small data")
CROSS_FIT_BELOW = 100
CROSS_FIT_FOLDS = 5

# ``bagging="auto"``: a bag of this many half-data members where cross-fitting would run, at its cost (four fits on
# all the rows against five on 4/5 of them; docs/methods/dbk.md, "A bag of half-data fits")
AUTO_BAG_MEMBERS = 8


def recalibration_scale(mean_z2: float, mean_z4: float, n: int,
                        standard_errors: float = RECALIBRATION_STANDARD_ERRORS) -> float:
    """α that ``fit`` puts on the variances from n validation z-scores: their mean z² plus ``standard_errors``
    standard errors √((mean z⁴ − mean z²²)/(n − 1)) (other counts: the study that chose the default).

    The plain mean (FM-GP Algorithm 1, ``recalibrate``) is the maximum-likelihood scale, but on a few dozen rows of
    the heavy-tailed residuals of real data its sampling distribution is right-skewed: it misses the rare large
    errors more often than not, and the test mean z² it leaves is above 1 in most fits. Adding part of its
    standard error moves it toward the expectation on small parts and vanishes on large ones (for Gaussian z the
    standard error is √(2/n) of the mean: 26 % at 30 rows, 3 % at 2000; heavier tails make it larger).
    """
    if n < 2:
        return mean_z2
    return mean_z2 + standard_errors * math.sqrt(max(mean_z4 - mean_z2 ** 2, 0.0) / (n - 1))


# the Student-t predictive's degrees of freedom are searched in [MIN_DF, MAX_DF]: above 2 for a finite variance (the
# std that ``predict`` returns), at the top indistinguishable from the Gaussian
MIN_DF, MAX_DF = 2.5, 1000.0


def student_t_df(z: np.ndarray) -> float:
    """Degrees of freedom ν of the unit-variance Student-t that maximises the likelihood of held-out z-scores z
    (errors over their predictive std after recalibration): the variance stays α's, ν only reshapes the predictive
    around it — peaked with heavy tails where the errors are (small ν), Gaussian where they are Gaussian (ν → ∞)."""
    z = np.asarray(z, dtype=np.float64)
    zero, one = np.zeros_like(z), np.ones_like(z)
    loss = lambda log_df: nll(z, zero, one, np.exp(log_df))  # noqa: E731  (the metric's own unit-variance t)
    return float(np.exp(minimize_scalar(loss, bounds=(np.log(MIN_DF), np.log(MAX_DF)), method="bounded").x))


def bag_z2(y: np.ndarray, means: np.ndarray, variances: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Squared z-scores of a bag of M = 2k half-data members, from the rows' out-of-bag predictions: ``means`` and
    ``variances`` (k, n), the k members that did not train on each row. Returns (z² for α, z² for the shape).

    The bag predicts the t of its members' mean μ and variance v̄ + S_M, S_M the spread of their M means. Out of bag
    only k members predict a row, and both parts of its z² differ from the bag's: with the members' means scattered
    with variance W about the bag's limit, (y − μ_k)² estimates e² + W/k where the bag's squared error is
    e² + W/M, and S_k ~ W·χ²_{k−1}/k is a noisier denominator than S_M ~ W·χ²_{M−1}/M. The plain out-of-bag z²
    = (y − μ_k)² / (v̄ + S_k) are the shape's; α's are those times one factor: the bag's expected z² summed over
    the rows, Σ max((y − μ_k)² − W/k + W/M, 0)·E[1/(v̄ + S_M)], over the k members' Σ (y − μ_k)²·E[1/(v̄ + S_k)],
    each row's W its v̄ times the pooled ratio ΣW/Σv̄ (one row's spread on k − 1 degrees of freedom is too noisy to
    use) and the expectations over the χ² by Gauss–Laguerre quadrature. Without it the bag's α was too large
    (docs/methods/dbk.md, "A bag of half-data fits"; ``tests/models/test_bagging.py``)."""
    k = means.shape[0]
    error2, member_var = (y - means.mean(0)) ** 2, variances.mean(0)
    plain = error2 / (member_var + means.var(0))
    if k < 2:  # one member out of bag: no spread to go on
        return plain, plain
    spread = member_var * means.var(0, ddof=1).sum() / member_var.sum()

    def mean_inverse(members):  # E[1/(v̄ + W·χ²_{m−1}/m)] per row
        nodes, weights = roots_genlaguerre(32, (members - 1) / 2 - 1)  # χ²_ν = 2·Gamma(ν/2)
        chi2 = 2 * nodes / members
        return (weights / weights.sum()) @ (1 / (member_var + spread * chi2[:, None]))

    M = 2 * k
    bag = np.sum(np.maximum(error2 - spread / k + spread / M, 0) * mean_inverse(M))
    return plain * bag / np.sum(error2 * mean_inverse(k)), plain


# the quantile at which the bag's α-z² are capped (``winsorised``)
BAG_ALPHA_QUANTILE = 0.99


def winsorised(z2: np.ndarray, quantile: float = BAG_ALPHA_QUANTILE) -> np.ndarray:
    """z² capped at their ``quantile``: what the bag's α rests on. Half-data members err far out of bag on a few
    rows in a way the whole bag does not at new rows (gal/yacht: the out-of-bag z² and the test rows' agree in their
    bulk, the out-of-bag 98 % quantile is twice the test rows'), and a mean of z² follows its tail, so α came out
    too large there; capping the top 1 % (2–3 rows on the small sets) leaves Gaussian z² within 2 %, lowered the NLL on
    every yacht set and made DBK's plain fit calibrated on uci/yacht (DAK's uci/yacht went the other way by one test
    row: docs/methods/dbk.md, "The bag's α: winsorised")."""
    return np.minimum(z2, np.quantile(z2, quantile))


def device_memory_gb(device) -> float:
    """The memory of ``device`` in GB: a GPU's total, or the machine's physical memory for the CPU."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory / 1e9
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9


def _mode_count(y: np.ndarray) -> int:
    return int(np.unique(y, return_counts=True)[1].max())


def halves_can_vary(y: np.ndarray) -> bool:
    """Whether the rows with targets y split into two halves that each hold two different targets (a member cannot
    fit constant targets): at least 4 rows, 2 of them off the most common value (count data: 23 rows of mostly 0)."""
    return len(y) >= 4 and len(y) - _mode_count(y) >= 2


def varying_halves(y: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """The two halves of a random permutation of the rows, redrawn while one has constant targets (only then: the
    first draw is kept whenever it will do). With ``halves_can_vary(y)`` a draw does with probability about 1/2 or
    more (the two off-mode rows fall in different halves)."""
    for _ in range(1000):
        halves = np.array_split(rng.permutation(len(y)), 2)
        if all(np.ptp(y[half]) > 0 for half in halves):
            return halves
    raise InputError("no split of the rows into two halves with varying targets was found in 1000 draws; "
                     "use bagging=0")


def z2_moments(z2: np.ndarray) -> tuple[float, float, int]:
    """(mean z², mean z⁴, rows) of squared z-scores: what ``recalibration_scale`` takes."""
    return float(z2.mean()), float((z2 ** 2).mean()), len(z2)


def selection_optimism(points, best: int | None = None) -> float:
    """Factor γ on the variance scale α of the check that early stopping picked on a validation part.

    ``points``: per validation check, a (2, n) array of the residuals y − μ and predictive variances; ``best``: the
    index of the check the training loop kept (by default the one this criterion picks on all points). Early
    stopping keeps the check with the lowest recalibrated NLL, mean log v + log α with α = mean z²
    (``NeuralGPRegressor._validation_nll``), and α is then fitted on the same points: on a few dozen points the pick
    favours checks whose errors happen to be small for their variance, so α is optimistic. Each point i is
    predicted by the whole procedure run without it — pick the check on the other points, fit α₋ᵢ on them — and
    γ = mean_i z_i²/α₋ᵢ over the same mean at the check picked on all points: the leave-one-out z² of the
    procedure over that of the picked check alone, which removes what leaving a point out does without a pick
    (a few large errors make it well above 1; a validation part without a pick is not corrected either, as in
    FM-GP and DKM). γ = 1 when every point picks the same check. What it does on the calibration suite's sets:
    docs/methods/dbk.md ("Recalibration after early stopping"), benchmarks/recalibration_selection.py.
    """
    stacked = np.stack([np.asarray(p, dtype=np.float64) for p in points])  # (checks, 2, n)
    z2, log_v = stacked[:, 0] ** 2 / stacked[:, 1], np.log(stacked[:, 1])
    n = z2.shape[1]

    def pick(Z, L, m):  # the check of lowest recalibrated NLL (the first of equals, as the training loop)
        crit = L / m + np.log(Z / m)
        return np.argmin(np.where(np.isfinite(crit), crit, np.inf), axis=0)

    Z, L = z2.sum(1, keepdims=True), log_v.sum(1, keepdims=True)
    Z_out, L_out = Z - z2, L - log_v  # (checks, points): the sums without point i
    cols = np.arange(n)
    picks = pick(Z_out, L_out, n - 1)
    best = pick(Z, L, n)[0] if best is None else best
    loo_z2 = z2[picks, cols] / (Z_out[picks, cols] / (n - 1))
    loo_z2_at_best = z2[best] / (Z_out[best] / (n - 1))
    return float(np.mean(loo_z2) / np.mean(loo_z2_at_best))


class SavedModel:
    """``save(path)`` / ``neuralgp.load(path)`` for every estimator: class, parameters, input scaler, the
    subclass's ``_payload_extras()`` and ``_fitted_state()`` (restored by ``_load_extras`` and ``_restore``).
    Also what every estimator shares with scikit-learn: the fitted test and the error before ``fit``."""

    param_rules: dict = {}  # hyper-parameter → rule(s), checked when fit starts (neuralgp.params)
    _fitted_attribute = "x_scaler_"

    def supports_distributed(self) -> bool:
        """Whether ``fit`` trains across the workers of an initialised process group (``neuralgp.distributed``)."""
        return False

    checkpoint = None  # estimators that take these parameters set them in __init__
    checkpoint_every = 100

    def _checkpoint(self, optimizer, Xt, yt, val=None, *generators):
        """The training loop's ``Checkpoint`` when ``checkpoint`` is a path (None otherwise): the training state is
        saved there every ``checkpoint_every`` steps, and a fit that finds the file resumes from it. The file is
        identified by the class, the parameters that shape the fit and the training (and validation) data."""
        if self.checkpoint is None:
            return None
        from neuralgp.train.loop import Checkpoint
        digest = hashlib.sha256(type(self).__name__.encode())
        params = {k: v for k, v in self.get_params().items()
                  if k not in ("checkpoint", "checkpoint_every", "verbose", "max_time", "device")}
        digest.update(repr(sorted(params.items())).encode())
        for t in (Xt, yt) + (() if val is None else (val[0], torch.as_tensor(val[1]))):
            digest.update(t.detach().cpu().contiguous().numpy().tobytes())
        return Checkpoint(self.checkpoint, self.checkpoint_every, optimizer, digest.hexdigest(), generators)

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, self._fitted_attribute)

    def _check_fitted(self):
        if not self.__sklearn_is_fitted__():
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit(X, y) first")

    def predict_rows(self, rows, out, chunk_rows: int | None = None):
        """Predict every row of a row source (``neuralgp.datasets.rows``) into ``out`` (``.npy`` or ``.csv``), a
        chunk at a time: memory flat in the number of rows (``neuralgp.streaming.predict_rows``)."""
        from neuralgp.streaming import predict_rows
        return predict_rows(self, rows, out, chunk_rows)

    def save(self, path):
        """Save everything needed to predict (not the training data, unless the method needs it) to ``path``."""
        return save_model(self._payload(), path)

    def _payload(self) -> dict:
        """What ``save`` writes (and ``_from_payload`` reads back): also how a model saves the models it holds."""
        self._check_fitted()
        params = {k: os.fspath(v) if isinstance(v, os.PathLike) else v  # a checkpoint=Path(...): torch loads str
                  for k, v in self.get_params(deep=False).items()}
        return {"class": type(self).__name__, "params": params,
                "n_features_in": self.n_features_in_, "x_scaler": self.x_scaler_.state(),
                **self._payload_extras(), "fitted": self._fitted_state()}

    @classmethod
    def _from_payload(cls, payload: dict):
        params = dict(payload["params"])
        device = params.get("device")
        if device is not None and torch.device(device).type == "cuda" and not torch.cuda.is_available():
            warnings.warn(f"this model was saved with device={device!r}, which this machine does not have: "
                          "loading it onto the CPU", stacklevel=3)
            params["device"] = "cpu"
        model = cls(**params)
        model.n_features_in_ = int(payload["n_features_in"])
        model.x_scaler_ = Scaler.from_state(payload["x_scaler"])
        model._load_extras(payload)
        model._restore(payload["fitted"])
        return model


def _refuse_process_group(model):
    """A clear error, not silently independent fits, when a model that cannot train across workers meets a
    process group."""
    if distributed.is_distributed() and not model.supports_distributed():
        raise InputError(f"{type(model).__name__} does not train across processes (a process group of "
                         f"{distributed.world()[1]} workers is initialised); fit it in one process, or use "
                         "dbk, svdbk, dak, fmgp, svgp or svdkl regression, which do (docs/distributed.md)")


class NeuralGPRegressor(SavedModel, RegressorMixin, BaseEstimator):
    """Subclasses implement ``_fit_scaled(X, y, X_val, y_val)`` and ``_predict_scaled(X) -> (mean, var_f, var_y)``
    on scaled float64 arrays, and ``_fitted_state()`` / ``_restore(state)`` for save and load."""

    input_scaling = "minmax"
    normalize_y = True

    # -- fitting -------------------------------------------------------------------------------
    def fit(self, X, y, X_val=None, y_val=None):
        """Fit on (X, y). The validation part (X_val, y_val) — or, when none is given, a random
        ``validation_fraction`` of (X, y) held out from training — drives early stopping where the model has it,
        and then the variances are recalibrated on it (when ``recalibrates_on_validation()`` and the validation part
        has at least ``MIN_RECALIBRATION_POINTS`` rows): α = ``recalibration_scale`` (mean z² plus half its
        standard error), times early stopping's correction ``selection_optimism`` (kept as ``selection_optimism_``).
        A validation part under ``CROSS_FIT_BELOW`` rows is too small for that: in one process, where the model
        can retrain (``_fixed_budget_clone``), α is ``recalibration_scale`` of the out-of-fold z² of the training
        and validation rows together, each fold predicted by the model retrained without it for the steps early
        stopping kept (``recalibrated_by_`` says which rule set α). With ``predictive="student_t"`` the same
        held-out z-scores also give the t's degrees of freedom (``_fit_predictive_shape``)."""
        check_params(self)
        _refuse_process_group(self)
        if self._bag_asked() and (distributed.is_distributed() or self.recalibration == "validation"):
            raise InputError(f"{type(self).__name__}(bagging={self.bagging}) refits its members in one process, with "
                             "recalibration=True or False; use bagging=0 in a process group or with "
                             "recalibration='validation'")
        X, y = check_X_y(X, y, owner=type(self).__name__)
        xn, yn = self.validation_names
        if (X_val is None) != (y_val is None):
            raise InputError(f"give both {xn} and {yn}, or neither")
        if X_val is not None:
            X_val, y_val = check_X_y(X_val, y_val, min_rows=1, x_name=xn, y_name=yn, owner=type(self).__name__,
                                     varying=False)
            if X_val.shape[1] != X.shape[1]:
                raise InputError(f"{xn} has {X_val.shape[1]} features but X has {X.shape[1]}")
        else:
            X, y, X_val, y_val = self._hold_out_validation(X, y)
        rows_y = y if y_val is None else np.concatenate([y, y_val])
        if self._bag_asked() and not halves_can_vary(rows_y):
            raise InputError(f"bagging={self.bagging} fits its members on halves of the rows, each with varying "
                             f"targets: that needs at least 4 rows and 2 off the most common target value, got "
                             f"{len(rows_y)} rows, {len(rows_y) - _mode_count(rows_y)} off it; use bagging=0")
        for attr in ("x_scaler_", "members_", *RECALIBRATION_STATE):  # no half fit
            self.__dict__.pop(attr, None)
        x_scaler = Scaler(self.input_scaling).fit(X, across_workers=True)
        y_scaler = Scaler("standard" if self.normalize_y else "none").fit(y[:, None], across_workers=True)
        scale_y = lambda v: y_scaler.transform(v[:, None])[:, 0]  # noqa: E731
        scaled_val = (None, None) if X_val is None else (x_scaler.transform(X_val), scale_y(y_val))
        self._fit_scaled(x_scaler.transform(X), scale_y(y), *scaled_val)
        # fitted only once training succeeded: a failed fit leaves no half-fitted model behind
        self.n_features_in_, self.y_scaler_, self.x_scaler_ = X.shape[1], y_scaler, x_scaler
        n_val = distributed.total_count(0 if X_val is None else len(y_val))
        rows_X = lambda: X if X_val is None else np.concatenate([X, X_val])  # noqa: E731  (only where refitted)
        members = self._bag_members(rows_y, n_val)
        if members:
            try:
                return self._fit_bag(rows_X(), rows_y, len(y), members)
            except BaseException:
                self.__dict__.pop("x_scaler_", None)  # a member's failure leaves no half-fitted bag behind
                raise
        if not n_val or not self.recalibrates_on_validation():
            if self.recalibrates_on_validation() and self.validation_fraction > 0:  # fewer than 4 rows
                self._warn_not_recalibrated(n_val)
            return self
        rule, z2, gamma = None, None, 1.0
        if n_val < CROSS_FIT_BELOW and not distributed.is_distributed():
            rule, z2 = "cross_fit", self._cross_fit_z2(rows_X(), rows_y, len(y))
        if z2 is None and n_val >= MIN_RECALIBRATION_POINTS:
            rule, z2, gamma = "validation", self._held_out_z2(X_val, y_val), self._selection_optimism()
        self._apply_recalibration(None if z2 is None else self._pooled_moments(z2), rule, gamma)
        if getattr(self, "variance_scale_", None) is not None:  # the z-scores that set α also shape the predictive
            self._fit_predictive_shape(z2 / self.variance_scale_)
        else:
            self._warn_not_recalibrated(n_val)
        return self

    def _warn_not_recalibrated(self, n_val: int) -> None:
        """Say that ``fit`` left the variances as the marginal likelihood set them: on a handful of rows that is
        over-confident (5–8 rows of a noisy sine: test mean z² 10–150 for every model, scikit-learn's GP too)."""
        rows = f"{n_val} row{'' if n_val == 1 else 's'}"
        warnings.warn(f"{type(self).__name__}'s predictive variances were not recalibrated: its validation part "
                      f"has {rows} (recalibration needs {MIN_RECALIBRATION_POINTS}) and cross-fitting all rows did "
                      f"not apply (it needs recalibration=True, one process and at least "
                      f"{max(MIN_RECALIBRATION_POINTS, 2 * CROSS_FIT_FOLDS)} rows whose folds vary); its std is the "
                      "marginal likelihood's alone, often over-confident on few rows", UserWarning, stacklevel=3)

    def _fit_predictive_shape(self, z2) -> None:
        """With ``predictive="student_t"``: the degrees of freedom ``predictive_df_`` of the unit-variance t fitted
        by maximum likelihood (``student_t_df``) to ``z2``, the squared held-out z-scores of the recalibrated
        predictive (those that set α, after α: the variance stays α's and ν only reshapes the predictive around
        it). In a process group from the main worker's share of the validation part, the same ν on every worker."""
        if getattr(self, "predictive", "gaussian") != "student_t":
            return
        df = np.nan
        if distributed.is_main():
            z = np.sqrt(np.asarray(z2, dtype=np.float64))
            df = student_t_df(z[np.isfinite(z)])
        self.predictive_df_ = float(distributed.from_main(torch.tensor(df, dtype=torch.float64)))

    def _apply_recalibration(self, moments, rule: str, gamma: float = 1.0) -> None:
        """Scale the variances by α = ``recalibration_scale(*moments)`` · γ (``moments``: (mean z², mean z⁴, rows),
        or None for none), kept as ``variance_scale_`` with ``selection_optimism_`` = γ and ``recalibrated_by_`` =
        ``rule``; an α that is not finite, or 0 (the held-out targets equal the predictions), is not applied."""
        alpha = np.nan if moments is None else recalibration_scale(*moments) * gamma
        if np.isfinite(alpha) and alpha > 0:
            self.variance_scale_, self.selection_optimism_, self.recalibrated_by_ = alpha, gamma, rule

    def _fixed_budget_clone(self, trained_rows: int | None = None, rows: int | None = None):
        """An unfitted copy that trains on all the rows it is given, silently, without validation or recalibration,
        for the budget ``_refit_budget`` gives; None where the model cannot refit, or with
        ``recalibration="validation"`` (``fit`` then recalibrates on the validation part alone)."""
        if getattr(self, "recalibration", None) == "validation":
            return None
        budget = self._refit_budget(trained_rows, rows)
        return None if budget is None else self._clone_for_refit(**budget)

    def _refit_budget(self, trained_rows: int | None, rows: int | None) -> dict | None:
        """The parameters that give a refit as many steps as this fitted model kept (on ``rows`` rows where this
        model trained on ``trained_rows``, when the step count depends on them); None where the model cannot."""
        return None

    def _clone_for_refit(self, **budget):
        """An unfitted copy with ``budget`` (its step count) that trains on every row it is given, silently, with
        neither validation nor recalibration."""
        return clone(self).set_params(validation_fraction=0.0, recalibration=False, verbose=False, checkpoint=None,
                                      **budget)

    def _bag_asked(self) -> bool:
        """Whether ``bagging`` is a number of members (not 0, nor "auto", which bags only where it can)."""
        return getattr(self, "bagging", 0) not in (0, "auto")

    def _bag_members(self, rows_y: np.ndarray, n_val: int) -> int:
        """How many members ``fit`` bags for the targets ``rows_y`` of all its rows: ``bagging``, or for "auto"
        ``AUTO_BAG_MEMBERS`` exactly where cross-fitting would set α (``_cross_fit_z2``: a validation part of 1 to
        ``CROSS_FIT_BELOW`` − 1 rows, recalibration on, one process, a model that can retrain, enough rows) and
        the halves can have varying targets (``halves_can_vary``), else 0."""
        bagging = getattr(self, "bagging", 0)
        if bagging != "auto":
            return int(bagging)
        crossfits = (0 < n_val < CROSS_FIT_BELOW and self.recalibrates_on_validation()
                     and not distributed.is_distributed() and self._fixed_budget_clone() is not None
                     and len(rows_y) >= max(MIN_RECALIBRATION_POINTS, 2 * CROSS_FIT_FOLDS))
        return AUTO_BAG_MEMBERS if crossfits and halves_can_vary(rows_y) else 0

    def _fit_bag(self, rows_X, rows_y, trained_rows: int, size: int):
        """``size`` = M members (``members_``), in M/2 pairs: each pair is ``_fixed_budget_clone`` fitted on the
        two halves of a random split (drawn with ``seed``) of all the rows (``rows_X``, ``rows_y``: training and
        validation; the fit trained on the first ``trained_rows``), so every row is out of bag for M/2 members.
        The bag predicts the t of the members' mean and variance; when the model recalibrates, α and the t's shape
        come from the out-of-bag predictions (``bag_z2``, α's ``winsorised``; ``recalibrated_by_`` = "bag"). Costs
        M/2 fits on all the rows, about what cross-fitting costs at M = 8."""
        pairs, n = size // 2, len(rows_y)
        template = self._fixed_budget_clone(trained_rows, n // 2)  # not None: ``fit`` refused the cases without one
        rng = np.random.default_rng(self.seed)
        members, oob_mean, oob_var = [], np.empty((pairs, n)), np.empty((pairs, n))
        for pair in tqdm(range(pairs), desc="bagging", unit="pair", leave=False,
                         disable=not getattr(self, "verbose", False)):
            halves = varying_halves(rows_y, rng)
            for side, kept in enumerate(halves):
                left_out = halves[1 - side]
                member = clone(template).set_params(bagging=0, seed=self.seed * 100 + 2 * pair + side)
                dist = member.fit(rows_X[kept], rows_y[kept]).predict_dist(rows_X[left_out])
                oob_mean[pair, left_out], oob_var[pair, left_out] = dist["mean"], dist["var_y"]
                members.append(member)
        self.members_ = members
        if self.recalibrates_on_validation():
            z2, shape_z2 = bag_z2(rows_y, oob_mean, oob_var)
            self._apply_recalibration(z2_moments(winsorised(z2)), "bag")
            if getattr(self, "variance_scale_", None) is not None:
                self._fit_predictive_shape(shape_z2 / recalibration_scale(*z2_moments(shape_z2)))
        return self

    def _cross_fit_z2(self, rows_X, rows_y, trained_rows: int):
        """The squared out-of-fold z-scores of all the rows (``rows_X``, ``rows_y``: training and validation; the
        fit trained on the first ``trained_rows``), in ``CROSS_FIT_FOLDS`` folds drawn with ``seed``: each fold
        predicted by ``_fixed_budget_clone`` fitted on the other folds. Every row is held out once, so α rests on
        all of them rather than on the few dozen of the validation part, and no row is predicted by a model whose
        training stopped on it. None when there are too few rows or the model cannot be retrained; a fold whose
        fit fails numerically, or whose kept rows have one target value, gives None too."""
        model = self._fixed_budget_clone(trained_rows, len(rows_y) - len(rows_y) // CROSS_FIT_FOLDS)
        if model is None:
            return None
        if len(rows_y) < max(MIN_RECALIBRATION_POINTS, 2 * CROSS_FIT_FOLDS):
            return None
        z2 = np.empty(len(rows_y))
        folds = np.array_split(np.random.default_rng(self.seed).permutation(len(rows_y)), CROSS_FIT_FOLDS)
        for held in tqdm(folds, desc="cross-fitting the variance scale", unit="fold", leave=False,
                         disable=not getattr(self, "verbose", False)):
            kept = np.setdiff1d(np.arange(len(rows_y)), held)
            if np.ptp(rows_y[kept]) == 0:  # count data whose few off-mode rows are all held out: nothing to fit
                return None
            try:
                mean, std = model.fit(rows_X[kept], rows_y[kept]).predict(rows_X[held], return_std=True)
            except (FloatingPointError, torch.linalg.LinAlgError):
                return None
            z2[held] = ((rows_y[held] - mean) / std) ** 2
        return z2

    def _selection_optimism(self) -> float:
        """γ of ``selection_optimism`` when the training loop kept every check's validation points (early stopping
        picked a check on them), else 1 (also when γ is not finite: left-out sums of zero, exact predictions)."""
        log = getattr(self, "train_log_", None)
        points = getattr(log, "validation_points", None)
        if not points or len(points) != len(log.history) or len(points[0][0]) <= MIN_RECALIBRATION_POINTS:
            return 1.0
        kept = [h[0] for h in log.history].index(log.best_step)  # the check whose state the loop restored
        with np.errstate(divide="ignore", invalid="ignore"):
            gamma = selection_optimism(points, kept)
        return gamma if np.isfinite(gamma) and gamma > 0 else 1.0

    validation_fraction = 0.0
    validation_names = ("X_val", "y_val")  # what ``fit`` calls its third and fourth arguments, for errors

    def recalibrates_on_validation(self) -> bool:
        """Whether ``fit`` recalibrates the variances on the validation part (FM-GP Algorithm 1; the GPyTorch
        baselines do not, as GPyTorch does not)."""
        return False

    def _hold_out_validation(self, X, y):
        """(X, y) split into a training part and a random ``validation_fraction`` (at least one row; none when
        the fraction is 0 or fewer than 4 rows are given), drawn with ``seed``: (X, y, X_val, y_val). A model that
        recalibrates on it gets at least ``MIN_RECALIBRATION_POINTS`` rows once there are 5 times as many: 10 % of
        90 rows (uci/fertility, concreteslump) would be too few to recalibrate on, and left them over-confident
        (DAK's plain fit on fertility: pooled coverage 0.48, mean z² 8.9)."""
        if self.validation_fraction == 0 or len(y) < 4:
            return X, y, None, None
        n_val = max(1, round(self.validation_fraction * len(y)))
        if self.recalibrates_on_validation() and len(y) >= 5 * MIN_RECALIBRATION_POINTS:
            n_val = max(n_val, MIN_RECALIBRATION_POINTS)
        perm = np.random.default_rng(self.seed).permutation(len(y))
        val, tr = perm[:n_val], perm[n_val:]
        return X[tr], y[tr], X[val], y[val]

    # -- conditioning on rows streamed from disk --------------------------------------------------------
    def conditions_on_rows(self) -> bool:
        """Whether the posterior is exact given the feature map, so that ``fit_posterior`` can recompute it from
        any rows (DBK and DAK with exact inference, FM-GP)."""
        return False

    def check_can_condition_on_rows(self):
        """Raise ``InputError`` unless ``fit_posterior`` can work on this model: an exact posterior, no bag (a fitted
        model's members, an unfitted one's ``bagging``), so a streamed fit calls it before fitting, not after."""
        bag = getattr(self, "members_", None) if self.__sklearn_is_fitted__() else self._bag_asked()
        if bag:
            raise InputError(f"a bag ({type(self).__name__} with bagging={self.bagging}) predicts from members fitted "
                             "on halves of the rows, and its α is theirs: fit_posterior needs bagging=0")
        if not self.conditions_on_rows():
            raise InputError(f"{type(self).__name__} cannot condition on streamed rows: only an exact weight-space "
                             "posterior can (its statistics ΦᵀΦ, Φᵀy add up chunk by chunk); use dbk, dak-exact or "
                             "fmgp")

    def fit_posterior(self, rows, chunk_rows: int | None = None):
        """Condition the fitted model's posterior on every row of ``rows`` (a ``neuralgp.datasets.rows`` source:
        ``NpyRows``, ``CsvRows``, ``ArrayRows``), read ``chunk_rows`` at a time: O(chunk·r + r²) memory whatever
        the number of rows. The feature map, σ², the scalers and ``variance_scale`` stay as fitted; only the
        statistics ΦᵀΦ, Φᵀy (and DBK's M_X) are recomputed. In a process group each worker reads its own shard
        and the statistics are summed. For data larger than memory: ``fit`` on ``rows.sample(m)``, then this."""
        from neuralgp.datasets.rows import RowSource
        self._check_fitted()
        self.check_can_condition_on_rows()
        if not isinstance(rows, RowSource) or not rows.has_targets:
            raise InputError("fit_posterior needs a row source with targets, e.g. "
                             "neuralgp.datasets.rows.NpyRows('X.npy', 'y.npy')")
        if rows.n_features != self.n_features_in_:
            raise InputError(f"the rows have {rows.n_features} features but {type(self).__name__} was fitted "
                             f"with {self.n_features_in_}")
        if rows.n_rows < distributed.world()[1]:
            raise InputError(f"{rows.n_rows} rows cannot be shared by {distributed.world()[1]} workers")
        device = getattr(self, "device", "cpu")

        def chunks():  # checked and scaled chunk by chunk, as fit checks and scales X and y
            for X, y in rows.chunks(chunk_rows):
                X = self.x_scaler_.transform(check_X(X, name="rows X", owner=type(self).__name__))
                y = check_X(y[:, None], name="rows y", owner=type(self).__name__)
                yield self._tensor(X, device=device), self._tensor(self.y_scaler_.transform(y)[:, 0],
                                                                    torch.float64, device)
        self._condition(chunks)  # assigns the new posterior only once every row is read
        self.n_posterior_rows_ = rows.n_rows
        return self

    def _condition(self, chunks):
        """Replace the posterior by the one given all rows of ``chunks()`` (scaled (X, y) tensor chunks)."""
        raise NotImplementedError

    @staticmethod
    def _validation_nll(val, predict_scaled, recalibrated: bool = False, keep_points: bool = False):
        """Validation NLL of the current state on ``val`` = (X tensor, y array), over every worker's validation rows;
        ``predict_scaled(X) -> (mean, var_f, var_y)``. ``recalibrated``: the NLL after the variance scaling that
        ``fit`` will apply (α = mean z² on the same points), so that early stopping selects what is returned.
        ``keep_points``: return (NLL, (2, n) tensor of residuals and variances) for ``selection_optimism``, in one
        process and up to ``MAX_SELECTION_POINTS`` points (the NLL alone otherwise)."""
        X_val, y_val = val
        with torch.no_grad():  # in chunks: the validation set of a 10⁷-point problem has 10⁶ rows
            parts = [predict_scaled(X_val[rows]) for rows in row_slices(len(X_val))]
        mean, var_y = torch.cat([p[0] for p in parts]).cpu().numpy(), torch.cat([p[2] for p in parts]).cpu().numpy()
        sums = torch.tensor([np.log(var_y).sum(), ((y_val - mean) ** 2 / var_y).sum(), len(y_val)],
                            dtype=torch.float64)
        sum_log_var, sum_z2, n = distributed.total(sums).tolist()
        alpha = sum_z2 / n if recalibrated and n >= MIN_RECALIBRATION_POINTS else 1.0
        nll = 0.5 * LOG_2PI + 0.5 * (sum_log_var / n + math.log(alpha)) + 0.5 * sum_z2 / (n * alpha)
        if keep_points and not distributed.is_distributed() and len(y_val) <= MAX_SELECTION_POINTS:
            return nll, torch.as_tensor(np.stack([y_val - mean, var_y]), dtype=torch.float64)
        return nll

    @staticmethod
    def _in_memory(Xt, yt):
        """Training tensors as the chunk source ``_condition`` reads: a zero-argument callable giving (X, y) row
        chunks (rows streamed from disk take the same form)."""
        return lambda: ((Xt[rows], yt[rows]) for rows in row_slices(len(Xt)))

    @property
    def _y_scale(self) -> float:
        return float(self.y_scaler_.scale_[0])

    def _scaled_inputs(self, X) -> np.ndarray:
        self._check_fitted()
        return self.x_scaler_.transform(check_X(X, n_features=self.n_features_in_, owner=type(self).__name__))

    def recalibrate(self, X_cal, y_cal):
        """Scale every predictive variance by α = mean squared z-score on (X_cal, y_cal) (FM-GP Algorithm 1).

        For a GP with k = σ_f²j + σ²δ this is σ_f² and σ² both times α: the mean does not change and the
        mean squared z-score on the calibration set becomes exactly 1. ``variance_scale_`` holds the product of
        all recalibrations so far. With ``predictive="student_t"`` the t's degrees of freedom are refitted on the
        same rows.
        """
        X_cal, y_cal = check_X_y(X_cal, y_cal, min_rows=1, x_name="X_cal", y_name="y_cal", owner=type(self).__name__,
                                 varying=False)
        z2 = self._held_out_z2(X_cal, y_cal)
        alpha = self._pooled_moments(z2)[0]
        if not (np.isfinite(alpha) and alpha > 0):
            raise InputError(f"recalibration factor is {alpha}; the calibration targets equal the predictions")
        self.variance_scale_ = self.variance_scale * alpha
        self._fit_predictive_shape(z2 / alpha)
        return self

    def _held_out_z2(self, X, y) -> np.ndarray:
        """Squared z-scores of the current predictive on (X, y) (this worker's rows in a process group)."""
        mean, std = self.predict(X, return_std=True)  # checks fitted and the feature count
        return ((y - mean) / std) ** 2

    @staticmethod
    def _pooled_moments(z2) -> tuple[float, float, int]:
        """(mean of z², mean of z⁴, rows) of squared z-scores: in a process group over every worker's rows."""
        sums = distributed.total(torch.tensor([z2.sum(), (z2 ** 2).sum(), len(z2)], dtype=torch.float64))
        return float(sums[0] / sums[2]), float(sums[1] / sums[2]), int(sums[2])

    @property
    def variance_scale(self) -> float:
        """Factor on all predictive variances set by ``recalibrate`` (1 before)."""
        return float(getattr(self, "variance_scale_", 1.0))

    @property
    def predictive_df(self):
        """Degrees of freedom of a Student-t predictive for y (``predictive_df_``), None for the Gaussian."""
        return getattr(self, "predictive_df_", None)

    # -- prediction ----------------------------------------------------------------------------
    def predict_dist(self, X) -> dict:
        """Predictive mean and variances of f and of y (noise included), in the units of y; with a Student-t
        predictive also its degrees of freedom ``df`` (var_y is then the t's variance)."""
        Xs = self._scaled_inputs(X)  # also checks that the model is fitted and X's features
        if getattr(self, "members_", None):  # a bag: its members' mean, their variances plus the means' spread
            dists = [member.predict_dist(X) for member in self.members_]
            means = np.stack([d["mean"] for d in dists])
            spread, alpha = means.var(0), self.variance_scale
            dist = {"mean": means.mean(0), **{k: alpha * (np.mean([d[k] for d in dists], 0) + spread)
                                             for k in ("var_f", "var_y")}}
        else:
            parts = [self._predict_scaled(Xs[i:i + PREDICT_ROWS]) for i in range(0, len(Xs), PREDICT_ROWS)]
            mean, var_f, var_y = (np.concatenate(p) for p in zip(*parts))
            s2 = self._y_scale ** 2 * self.variance_scale
            dist = {"mean": self.y_scaler_.inverse_transform(mean[:, None])[:, 0], "var_f": var_f * s2,
                    "var_y": var_y * s2}
        if self.predictive_df is not None:
            dist["df"] = self.predictive_df
        return dist

    def predict(self, X, return_std: bool = False):
        """Predictive mean; with ``return_std`` also the predictive std of y (noise included). For a Student-t
        predictive (``predictive_df`` not None) mean ± 1.96 std is not its 95 % interval: ``predict_interval``."""
        dist = self.predict_dist(X)
        if return_std:
            return dist["mean"], np.sqrt(dist["var_y"])
        return dist["mean"]

    def predict_interval(self, X, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """The central ``level`` predictive interval of y (lower, upper), from the predictive's own quantiles."""
        if not 0 < level < 1:
            raise InputError(f"level must be in (0, 1), got {level}")
        mean, std = self.predict(X, return_std=True)
        half = quantile(0.5 + level / 2, self.predictive_df) * std
        return mean - half, mean + half

    # -- persistence ---------------------------------------------------------------------------
    def _payload_extras(self) -> dict:
        return {"y_scaler": self.y_scaler_.state(), "variance_scale": self.variance_scale,
                "predictive_df": self.predictive_df,
                "members": [member._payload() for member in getattr(self, "members_", None) or []]}

    def _load_extras(self, payload: dict):
        self.y_scaler_ = Scaler.from_state(payload["y_scaler"])
        if payload.get("variance_scale", 1.0) != 1.0:  # files from before recalibration existed have none
            self.variance_scale_ = float(payload["variance_scale"])
        if payload.get("predictive_df") is not None:  # nor from before the Student-t predictive
            self.predictive_df_ = float(payload["predictive_df"])
        if payload.get("members"):  # a bag's (files from before the option have none)
            self.members_ = [type(self)._from_payload(member) for member in payload["members"]]
        if "predictive" in self.get_params() and "predictive" not in payload["params"]:
            self.predictive = "gaussian"  # a file from before the option: what it was fitted as, whatever the default

    @staticmethod
    def _tensor(a, dtype=torch.float32, device="cpu"):
        return torch.as_tensor(np.ascontiguousarray(a), dtype=dtype, device=device)


class NeuralGPClassifier(SavedModel, ClassifierMixin, BaseEstimator):
    """Subclasses implement ``_fit_scaled(X, labels, n_classes)`` on scaled inputs and labels 0..C−1,
    ``_latent_samples(X) -> (S, m, C)`` draws of the class scores f (probabilities are E[softmax(f/T)]),
    and ``_fitted_state()`` / ``_restore(state)``. Labels of any kind (integers, strings, …) are accepted and
    given back."""

    input_scaling = "standard"
    _fitted_attribute = "classes_"

    def fit(self, X, y, X_cal=None, y_cal=None):
        """Fit on (X, y); with (X_cal, y_cal) also the softmax temperature (``calibrate_temperature``)."""
        check_params(self)
        _refuse_process_group(self)
        X, y = check_labels(X, y, owner=type(self).__name__)
        if (X_cal is None) != (y_cal is None):
            raise InputError("give both X_cal and y_cal, or neither")
        classes = np.unique(y)
        if X_cal is not None:
            X_cal, y_cal = _check_calibration(X_cal, y_cal, classes, X.shape[1], type(self).__name__)
        for attr in ("x_scaler_", "classes_"):  # a refit that fails leaves no half-fitted model
            self.__dict__.pop(attr, None)
        x_scaler = Scaler(self.input_scaling).fit(X)
        self._fit_scaled(x_scaler.transform(X), np.searchsorted(classes, y), len(classes))
        self.classes_, self.n_features_in_, self.x_scaler_ = classes, X.shape[1], x_scaler
        self.temperature_ = 1.0
        if X_cal is not None:
            self.calibrate_temperature(X_cal, y_cal)
        return self

    def calibrate_temperature(self, X_cal, y_cal):
        """Fit the softmax temperature T on labelled held-out data by NLL (the argmax does not move)."""
        self._check_fitted()
        X_cal, y_cal = _check_calibration(X_cal, y_cal, self.classes_, self.n_features_in_, type(self).__name__)
        f = self._latent_samples(self._scaled(X_cal))
        self.temperature_ = fit_temperature(f, np.searchsorted(self.classes_, np.asarray(y_cal)))
        return self

    def _scaled(self, X) -> np.ndarray:
        self._check_fitted()
        return self.x_scaler_.transform(check_X(X, n_features=self.n_features_in_, owner=type(self).__name__))

    def predict_proba(self, X) -> np.ndarray:
        Xs = self._scaled(X)
        return np.concatenate([mc_softmax(self._latent_samples(Xs[i:i + SOFTMAX_ROWS]), self.temperature_)
                               .double().cpu().numpy() for i in range(0, len(Xs), SOFTMAX_ROWS)])

    def predict(self, X) -> np.ndarray:
        proba = self.predict_proba(X)  # checks fitted first
        return self.classes_[proba.argmax(1)]

    def _payload_extras(self) -> dict:
        return {"classes": self.classes_.tolist(), "temperature": self.temperature_}

    def _load_extras(self, payload: dict):
        classes = payload["classes"]  # a list (labels of any kind); a tensor in files before string labels
        self.classes_ = classes.numpy() if isinstance(classes, torch.Tensor) else np.asarray(classes)
        self.temperature_ = float(payload["temperature"])

    def _tensor(self, a) -> torch.Tensor:
        return torch.as_tensor(np.ascontiguousarray(a), dtype=torch.float32, device=self.device)


def _check_calibration(X_cal, y_cal, classes, n_features, owner):
    """Labelled calibration data, all labels among the training classes."""
    X_cal, y_cal = check_labels(X_cal, y_cal, "X_cal", "y_cal", min_classes=1, n_features=n_features, owner=owner)
    unknown = np.setdiff1d(y_cal, classes)
    if len(unknown):
        raise InputError(f"y_cal has classes {unknown.tolist()} that are not in y")
    return X_cal, y_cal

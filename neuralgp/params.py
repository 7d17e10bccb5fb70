"""Hyper-parameter rules, declared once per estimator and checked when ``fit`` starts.

scikit-learn's convention: ``__init__`` only stores its arguments, ``fit`` validates them. Each estimator
class declares ``param_rules = {name: rule or (rule, …)}``; a value passes when any of its rules accepts it,
and otherwise ``fit`` stops before any work with one error naming the parameter, the accepted values and the
value given.
"""

from __future__ import annotations

import os

from dataclasses import dataclass
from numbers import Integral, Real
from typing import Callable

import numpy as np
import torch

from neuralgp.errors import ParameterError


@dataclass(frozen=True)
class Rule:
    accepts: Callable[[object], bool]
    text: str


def _is_int(v) -> bool:
    return isinstance(v, Integral) and not isinstance(v, (bool, np.bool_))


def integer(low: int | None = None) -> Rule:
    return Rule(lambda v: _is_int(v) and (low is None or v >= low),
                "an integer" + ("" if low is None else f" >= {low}"))


def real(low: float, strict: bool = False, below: float | None = None) -> Rule:
    def accepts(v):
        if not isinstance(v, Real) or isinstance(v, (bool, np.bool_)) or not np.isfinite(v):
            return False
        return (v > low if strict else v >= low) and (below is None or v < below)
    return Rule(accepts, f"a number {'>' if strict else '>='} {low}" + ("" if below is None else f" and < {below}"))


def one_of(*values) -> Rule:
    return Rule(lambda v: isinstance(v, (str, bool, np.bool_, type(None))) and any(
        v is x or (type(v) is type(x) and v == x) for x in values), "one of " + ", ".join(map(repr, values)))


def int_tuple(min_len: int = 1) -> Rule:
    return Rule(lambda v: isinstance(v, (tuple, list)) and len(v) >= min_len and all(_is_int(p) and p >= 1 for p in v),
                f"a tuple of at least {min_len} integers >= 1")


BOOL = Rule(lambda v: isinstance(v, (bool, np.bool_)), "True or False")
NONE = Rule(lambda v: v is None, "None")
DEVICE = Rule(lambda v: isinstance(v, (str, torch.device)), "a torch device such as 'cpu' or 'cuda'")
POSITIVE_INT = integer(1)
# True: α on the validation part, cross-fitted on all rows when that part is small; "validation": on that part
# alone; False: none (neuralgp.models.base.NeuralGPRegressor.fit)
RECALIBRATION = (BOOL, one_of("validation"))
# members of a bag (``NeuralGPRegressor._fit_bag``): complementary pairs, so an even number; 0 is no bag, "auto" a
# bag where cross-fitting would run
BAGGING = (Rule(lambda v: _is_int(v) and (v == 0 or (v >= 2 and v % 2 == 0)), "0 (no bag) or an even integer >= 2"),
           one_of("auto"))
PREDICTIVE = one_of("gaussian", "student_t")  # the predictive's shape around its mean and variance
STEPS = integer(0)  # training iterations or epochs; 0 keeps the initial state (the untrained feature map's GP)
POSITIVE = real(0, strict=True)
NON_NEGATIVE = real(0)
SEED = integer(0)

# what every neuralgp estimator takes where it means something
VALIDATION_FRACTION = Rule(lambda v: isinstance(v, Real) and not isinstance(v, (bool, np.bool_)) and 0 <= v < 1,
                           "a number in [0, 1)")
PATH = Rule(lambda v: isinstance(v, (str, os.PathLike)) and str(v) != "", "a file path")
CHECKPOINT_RULES = {"checkpoint": (NONE, PATH), "checkpoint_every": POSITIVE_INT}
COMMON_RULES = {"seed": SEED, "device": DEVICE, "verbose": BOOL, "max_time": (NONE, POSITIVE)}


def check_params(estimator) -> None:
    """Raise ``ParameterError`` for the first parameter of ``estimator`` that none of its rules accepts."""
    for name, rules in type(estimator).param_rules.items():
        rules = rules if isinstance(rules, tuple) else (rules,)
        value = getattr(estimator, name)
        if not any(rule.accepts(value) for rule in rules):
            raise ParameterError(f"{type(estimator).__name__}: {name} must be "
                                 f"{' or '.join(rule.text for rule in rules)}, got {value!r}")

"""Which mean model the calibration row "Two-stage" (the default, mean="krr-ard"; named "Two-stage (ARD mean)" until
2026-11-27) picks on a split, with the kernel-ridge search of an older commit (BEFORE, default 966f63f: ARD
candidates scored in sample) and of the working tree: the row's estimator (fit on training + validation parts,
seed = split) runs up to the end of its search, no further; with the seconds each took to get there (1 thread).
Where both pick the same (kernel, lengthscales, λ), the rest of the fit is the same code: the older record stands.
Usage: python benchmarks/twostage_ard_choice.py DATASET SPLIT [SPLIT ...]; one JSON line per split. With
BEFORE_PICKS=FILE (lines of an earlier run with the same BEFORE), the older search's pick and seconds are read from
there instead of being recomputed."""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

from neuralgp.bench.runner import _load
from neuralgp.bench.suites.calibration import SUITES, split_of
from neuralgp.twostage import ridge

torch.set_num_threads(1)
BEFORE = os.environ.get("BEFORE", "966f63f")
SUITE, ROW = SUITES[0], "Two-stage"


class Chosen(Exception):
    pass


def _stop(self, X, y, loo=False):
    raise Chosen(self.kernel_, self.length_scale_, self.alpha_)


def _older_search():
    source = subprocess.run(["git", "show", f"{BEFORE}:neuralgp/twostage/ridge.py"], capture_output=True, text=True,
                            check=True, cwd=os.path.dirname(os.path.abspath(__file__))).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location("ridge_before", f.name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    os.unlink(f.name)
    return _search(module.KernelRidgeCV)


def _search(cls):
    """The methods that make the search: ``fit`` and the helpers it calls on ``self``."""
    return {name: getattr(cls, name) for name in ("fit", "_score_ard") if hasattr(cls, name)}


def choice(search, ds, seed):
    for name, method in search.items():
        setattr(ridge.KernelRidgeCV, name, method)
    ridge.KernelRidgeCV.fit_chosen = _stop
    try:
        model = SUITE.models[ROW]({"verbose": False, **SUITE.model_params, "seed": seed}, len(ds.y_train))
        model.fit(np.vstack([ds.X_train, ds.X_val]), np.concatenate([ds.y_train, ds.y_val]))
    except Chosen as chosen:
        kernel, length_scale, alpha = chosen.args
        return [kernel, list(length_scale) if np.ndim(length_scale) else length_scale, alpha]
    raise RuntimeError("the fit ended without a kernel-ridge search")


if __name__ == "__main__":
    name, splits = sys.argv[1], [int(s) for s in sys.argv[2:]]
    before, now = _older_search(), _search(ridge.KernelRidgeCV)
    known = {}
    if os.environ.get("BEFORE_PICKS"):
        for line in open(os.environ["BEFORE_PICKS"]):
            r = json.loads(line)
            if r.get("before_commit") == BEFORE:
                known[(r["dataset"], r["split"])] = (r["before"], r.get("seconds_before"))
    for split in splits:
        ds = _load(name, split, None, split_of)
        if (name, split) in known:
            old, seconds_before = known[(name, split)]
        else:
            start = time.perf_counter()
            old = choice(before, ds, split)
            seconds_before = round(time.perf_counter() - start, 1)
        start = time.perf_counter()
        new = choice(now, ds, split)
        print(json.dumps({"dataset": name, "split": split, "before": old, "now": new, "same": old == new,
                          "before_commit": BEFORE, "seconds_before": seconds_before,
                          "seconds_now": round(time.perf_counter() - start, 1)}), flush=True)

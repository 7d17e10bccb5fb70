"""How should the DKM solver step θ after each sweep? A study behind issue 17, not a suite.

Per gal/ split, from the same initialisation at the default widths (300), 30 solver sweeps each followed by ≤ 50
L-BFGS iterations on θ, with the Grams held two ways:
  - "whitened" (the library's ``hyper_step``): W_ℓ = L_ℓ⁻¹G_ℓL_ℓ⁻ᵀ held, G_ℓ moves with its prior K(G_ℓ₋₁);
  - "fixed Grams" (the solver at commit b201cf8, which stopped L-BFGS after 20 iterations; 50 here, so that only
    the coordinates differ): G_ℓ held, only the kernels move.
Printed: ℒ after 10 and 30 sweeps, the last sweep's gain, and the test RMSE (data units) after 10 sweeps, as
``DKMRegressor(validation_fraction=0)`` fits (the Table 1 protocol). With ``--fixed-theta`` instead: θ held at its
start, sweeps only, for 1 and 2 layers and for the solver's options (λ, the direct CARE): ℒ's gap to its 40th sweep.

    NEURALGP_DATA=../shared/data OMP_NUM_THREADS=1 python benchmarks/dkm_theta_step.py gal/yacht:0,1 gal/bostonHousing:0
"""

from __future__ import annotations

import sys

import numpy as np
import scipy.optimize
import torch

import neuralgp.dkm.solver as solver
from neuralgp import datasets
from neuralgp.metrics import rmse
from neuralgp.models import DKMRegressor

WHITENED = solver.hyper_step


def fixed_gram_step(obj, theta, Gs, max_iter=solver.HYPER_ITERATIONS):
    """L-BFGS-B on θ with the Grams themselves held (the kernel-hyper objective: its prior chain)."""
    free = obj.objective != "kernel_hyper"

    def f(x):
        t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        try:
            value = obj.value(t, Gs if free else None)
        except torch.linalg.LinAlgError:
            return solver.BAD_OBJECTIVE, np.zeros_like(x)
        grad, = torch.autograd.grad(value, t)
        return -float(value.detach()), -grad.numpy()
    x0 = theta.detach().numpy()
    res = scipy.optimize.minimize(f, x0, jac=True, method="L-BFGS-B", options={"maxiter": int(max_iter)})
    theta = torch.tensor(res.x if res.fun <= f(x0)[0] else x0, dtype=torch.float64)
    return theta, (Gs if free else [G.detach() for G in obj.prior_chain(theta)])


def data(name, split):
    ds = datasets.load(name, split=f"gal:{split}")
    return np.vstack([ds.X_train, ds.X_val]), np.concatenate([ds.y_train, ds.y_val]), ds


def theta_steps(name, split):
    X, y, ds = data(name, split)
    cells = []
    for label, step in (("whitened", WHITENED), ("fixed Grams", fixed_gram_step)):
        solver.hyper_step = step
        long = DKMRegressor(validation_fraction=0, max_iter=30, verbose=False).fit(X, y).solver_log_.objective
        model = DKMRegressor(validation_fraction=0, verbose=False).fit(X, y)
        cells += [f"{long[10]:.2f}", f"{long[30]:.2f}", f"{long[30] - long[29]:.3f}",
                  f"{rmse(ds.y_test, model.predict(ds.X_test)):.4f}"]
    solver.hyper_step = WHITENED
    return cells


def fixed_theta(name, split):
    X, y, _ = data(name, split)
    cells = []
    for n_layers, kw in ((1, {}), (2, {}), (2, {"lam": 0.0}), (2, {"solver": "care"})):
        model = DKMRegressor(n_layers=n_layers, validation_fraction=0, max_iter=40, learn_hyper=False,
                             verbose=False, **kw).fit(X, y)
        o = np.array(model.solver_log_.objective)
        cells.append(" / ".join(f"{o[-1] - o[k]:.3g}" for k in (5, 10, 15, 20, 30)))
    return cells


def main(args):
    torch.set_num_threads(1)
    fixed = "--fixed-theta" in args
    head = (["1 layer", "2 layers", "2 layers, λ = 0", "2 layers, CARE"] if fixed else
            [f"{v}: {c}" for v in ("whitened", "fixed Grams") for c in ("ℒ@10", "ℒ@30", "gain@30", "RMSE@10")])
    print("set\tsplit\t" + "\t".join(head), flush=True)
    for item in (a for a in args if not a.startswith("--")):
        name, splits = item.split(":")
        for split in splits.split(","):
            cells = (fixed_theta if fixed else theta_steps)(name, int(split))
            print(f"{name}\t{split}\t" + "\t".join(cells), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

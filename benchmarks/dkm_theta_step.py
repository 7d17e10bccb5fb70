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
import neuralgp.models.dkm as dkm_model
from neuralgp import datasets
from neuralgp.metrics import rmse
from neuralgp.models import DKMRegressor

WHITENED = solver.hyper_step
LIBRARY_FIT = dkm_model.fit_dkm
ANDERSON_MEMORY = 3


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
        long = DKMRegressor(validation_fraction=0, input_width=None, max_iter=30, verbose=False).fit(X, y)
        long = long.solver_log_.objective
        model = DKMRegressor(validation_fraction=0, input_width=None, verbose=False).fit(X, y)
        cells += [f"{long[10]:.2f}", f"{long[30]:.2f}", f"{long[30] - long[29]:.3f}",
                  f"{rmse(ds.y_test, model.predict(ds.X_test)):.4f}"]
    solver.hyper_step = WHITENED
    return cells


def fixed_theta(name, split):
    X, y, _ = data(name, split)
    cells = []
    for n_layers, kw in ((1, {}), (2, {}), (2, {"lam": 0.0}), (2, {"solver": "care"})):
        model = DKMRegressor(n_layers=n_layers, validation_fraction=0, input_width=None, max_iter=40, learn_hyper=False,
                             verbose=False, **kw).fit(X, y)
        o = np.array(model.solver_log_.objective)
        cells.append(" / ".join(f"{o[-1] - o[k]:.3g}" for k in (5, 10, 15, 20, 30)))
    return cells


def anderson_fit(obj, _solver="newton", max_iter=10, lam=5.0, beta=1.0, _learn_hyper=True, _lr=0.01, theta=None,
                 progress=None):
    """``fit_dkm``'s sweeps and θ steps, each followed by an Anderson-mixed candidate of (W_1..W_L, θ)."""
    theta = obj.initial_theta() if theta is None else theta
    Gs, log = [G.detach() for G in obj.prior_chain(theta)], solver.SolverLog()
    P, L = len(obj.Y), obj.n_layers
    log.add(float(obj.value(theta, Gs)), 0.0, 0.0)

    def pack(t, grams):
        return torch.cat([W.reshape(-1) for W in solver.whiten(obj, t, grams)] + [t])
    states, residuals = [], []
    with torch.no_grad():
        x = pack(theta, Gs)  # the state the next sweep starts from
    for _ in range(int(max_iter)):
        with torch.no_grad():
            for layer in range(L, 0, -1):
                solver.update_layer(obj, theta, Gs, layer, lam, beta, "newton")
        theta, Gs = solver.hyper_step(obj, theta, Gs)
        with torch.no_grad():
            g = pack(theta, Gs)
            value = float(obj.value(theta, Gs))
            states, residuals = (states + [g])[-ANDERSON_MEMORY - 1:], (residuals + [g - x])[-ANDERSON_MEMORY - 1:]
            x = g
            if len(states) > 1:
                dF = torch.stack([b - a for a, b in zip(residuals, residuals[1:])], 1)
                dX = torch.stack([b - a for a, b in zip(states, states[1:])], 1)
                gamma = torch.linalg.lstsq(dF, residuals[-1][:, None]).solution[:, 0]
                mixed = g - dX @ gamma
                Ws = [solver._sym(mixed[i * P * P:(i + 1) * P * P].reshape(P, P)) for i in range(L)]
                t = mixed[L * P * P:]
                try:
                    if all(solver._is_pd(W.numpy()) for W in Ws):
                        grams = solver.colour(obj, t, Ws)
                        mixed_value = float(obj.value(t, grams))
                        if mixed_value > value:  # the mixed state (Ws, t) is the next sweep's start
                            theta, Gs, value, x = t, grams, mixed_value, mixed
                except torch.linalg.LinAlgError:
                    pass  # a mixed θ with a singular kernel matrix: keep the plain iterate
            log.add(value, 0.0, 0.0)
    return theta, Gs, log


def anderson(name, split):
    X, y, ds = data(name, split)
    cells = []
    for fit in (LIBRARY_FIT, anderson_fit):
        dkm_model.fit_dkm = fit
        o = DKMRegressor(validation_fraction=0, input_width=None, max_iter=40, verbose=False).fit(X, y)
        o = o.solver_log_.objective
        model = DKMRegressor(validation_fraction=0, input_width=None, verbose=False).fit(X, y)
        cells += [" / ".join(f"{o[k]:.2f}" for k in (5, 10, 15, 20, 30, 40)),
                  f"{rmse(ds.y_test, model.predict(ds.X_test)):.4f}"]
    dkm_model.fit_dkm = LIBRARY_FIT
    return cells


def main(args):
    torch.set_num_threads(1)
    fixed, mixed = "--fixed-theta" in args, "--anderson" in args
    head = (["1 layer", "2 layers", "2 layers, λ = 0", "2 layers, CARE"] if fixed else
            ["sweeps: ℒ@5/10/15/20/30/40", "RMSE@10", "Anderson: ℒ@5/10/15/20/30/40", "RMSE@10"] if mixed else
            [f"{v}: {c}" for v in ("whitened", "fixed Grams") for c in ("ℒ@10", "ℒ@30", "gain@30", "RMSE@10")])
    print("set\tsplit\t" + "\t".join(head), flush=True)
    for item in (a for a in args if not a.startswith("--")):
        name, splits = item.split(":")
        for split in splits.split(","):
            cells = (fixed_theta if fixed else anderson if mixed else theta_steps)(name, int(split))
            print(f"{name}\t{split}\t" + "\t".join(cells), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

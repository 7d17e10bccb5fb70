"""The DKM solvers: top-down block-coordinate ascent with one Riccati equation per layer (Algorithm 1 as the spec
corrects it), L-BFGS on the kernel hyper-parameters after each sweep (the Grams held in whitened coordinates), and
Adam on a Cholesky parameterisation (the comparison of Figure 1). Linear algebra from SciPy
(``solve_continuous_lyapunov``, ``solve_continuous_are``).

Per layer ℓ, at the current G̃ (eq. 32 with the proximal term of App. D):
A = ½ (∂D'_{ℓ+1}/∂G) G̃,  U = −∂T_ℓ/∂G + λG̃⁻¹,  Q = G̃ (∂T_{ℓ+1}/∂G) G̃ + λG̃,  0 = AᵀG + GA − GUG + Q.
``"newton"`` (default): one β-shifted Kleinman–Newton step from G̃ (App. C): (A − UG̃ − βI)ᵀδ + δ(A − UG̃ − βI) =
−R(G̃), G = G̃ + δ. ``"care"``: the CARE solved directly (30–40× slower at P ≈ 900; falls back to a Newton step
when SciPy's solver fails). An update that would leave the positive-definite cone (a Cholesky factorisation
fails) is retried with β doubled, up to 10 times; then the layer keeps G̃ for this sweep (counted in the log).
``"joint"``: a few such sweeps, then trust-region Newton on θ and every layer's Gram at once (``_fit_joint``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg
import scipy.optimize
import torch
from threadpoolctl import threadpool_limits

from neuralgp.dkm.kernels import SECOND_ORDER_KERNELS
from neuralgp.dkm.objective import DKMObjective

SOLVERS = ("newton", "care", "adam", "joint")
METRIC_SOLVERS = ("newton", "care")  # the solvers that learn an input metric Ω (in their θ step)
MAX_SHIFT_DOUBLINGS = 10
HYPER_ITERATIONS = 50  # L-BFGS iterations on θ after each sweep
BAD_OBJECTIVE = 1e30
JOINT_WARM_SWEEPS = 3  # "joint": Newton–Lyapunov sweeps before the joint Newton iterations


@dataclass
class SolverLog:
    """Per iteration: ℒ, the largest ‖∂ℒ/∂G_ℓ‖_F over layers, wall-clock seconds since the start (not counting the
    time spent in the ``progress`` callback)."""

    objective: list = field(default_factory=list)
    grad_norm: list = field(default_factory=list)
    seconds: list = field(default_factory=list)
    kept: int = 0  # layer updates that could not stay positive definite and kept G̃
    paused: float = 0.0  # seconds spent in the progress callback

    def report(self, progress, theta, Gs):
        if progress is not None:
            t = time.perf_counter()
            progress(self, theta, Gs)
            self.paused += time.perf_counter() - t

    def add(self, value: float, grad: float, seconds: float):
        self.objective.append(value)
        self.grad_norm.append(grad)
        self.seconds.append(seconds)


def _sym(A):
    return 0.5 * (A + A.T)


def _is_pd(G: np.ndarray) -> bool:
    try:
        np.linalg.cholesky(G)
        return True
    except np.linalg.LinAlgError:
        return False


def care_coefficients(obj: DKMObjective, theta, Gs: list, layer: int, lam: float):
    """(A, U, Q) of eq. 32 (+ App. D) for hidden layer ``layer`` (1..L) at the current Grams, as NumPy arrays."""
    weights, _ = obj.unpack(theta)
    Gt = Gs[layer - 1]
    previous = obj.G0 if layer == 1 else Gs[layer - 2]
    K_prev = obj.K(theta, layer - 1, previous)
    K_next = obj.K(theta, layer, Gt)
    top = layer == obj.n_layers
    G_next = obj.G_out if top else Gs[layer]
    nu, nu_next = obj.widths[layer - 1], (obj.nu_out if top else obj.widths[layer])
    Kn_inv = torch.cholesky_inverse(torch.linalg.cholesky(K_next))
    Gt_inv = torch.cholesky_inverse(torch.linalg.cholesky(Gt))
    w = weights[layer]
    g_T = -0.5 * nu * torch.cholesky_inverse(torch.linalg.cholesky(K_prev))
    g_D = obj.kernel.vjp(w, Gt, -0.5 * nu_next * Kn_inv)
    if obj.objective == "dkm":  # D' = (ν_ℓ/2) log|G_ℓ| + D_{ℓ+1}; the features objective has D alone
        g_D = g_D + 0.5 * nu * Gt_inv
    g_T_next = obj.kernel.vjp(w, Gt, 0.5 * nu_next * Kn_inv @ G_next @ Kn_inv)
    A = 0.5 * g_D @ Gt
    U = _sym(-g_T + lam * Gt_inv)
    Q = _sym(Gt @ g_T_next @ Gt + lam * Gt)
    return A.numpy(), U.numpy(), Q.numpy()


def newton_step(A, U, Q, Gt, beta: float) -> np.ndarray:
    """One β-shifted Kleinman–Newton step on the CARE from G̃ (App. C)."""
    R = A.T @ Gt + Gt @ A - Gt @ U @ Gt + Q
    A_lyap = A - U @ Gt - beta * np.eye(len(Gt))
    delta = scipy.linalg.solve_continuous_lyapunov(A_lyap.T, -R)  # A_lyapᵀδ + δA_lyap = −R
    return _sym(Gt + delta)


def care_solve(A, U, Q) -> np.ndarray:
    """The CARE AᵀG + GA − GUG + Q = 0 by SciPy (B Bᵀ = U, R = I)."""
    B = np.linalg.cholesky(U)
    return _sym(scipy.linalg.solve_continuous_are(A, B, Q, np.eye(len(A))))


def update_layer(obj, theta, Gs, layer, lam, beta, solver, before: float, relaxation: float = 1.0) -> float | None:
    """Replace Gs[layer − 1] by the solver's update G, kept only where it is positive definite and ℒ does not fall
    below ``before`` (ℒ at the current Grams; one Newton step on the CARE of a nonlinear kernel is no ascent step by
    construction: on 27 rows of 5 inputs one lost 1786 nats); else the next, β-doubled (more damped) Newton step.
    Returns ℒ after the update, None when none qualified and G̃ stays. With ``relaxation`` ω ≠ 1 first
    G̃ + ω(G − G̃) (over-relaxed block coordinate ascent) where that is ⪰ G/2."""
    A, U, Q = care_coefficients(obj, theta, Gs, layer, lam)
    Gt = Gs[layer - 1].numpy()

    def accept(G) -> float | None:  # G finite and positive definite
        trial = list(Gs)
        trial[layer - 1] = torch.as_tensor(G)
        try:
            value = float(obj.value(theta, trial))
        except torch.linalg.LinAlgError:
            return None
        if not value >= before - 1e-9 * abs(before):
            return None
        Gs[layer - 1] = trial[layer - 1]
        return value

    def steps():
        if solver == "care":
            try:
                yield care_solve(A, U, Q)
            except (np.linalg.LinAlgError, ValueError):
                pass  # SciPy's "eigenvalues too close to the imaginary axis" and the like: Newton steps instead
        for doubling in range(MAX_SHIFT_DOUBLINGS):
            yield newton_step(A, U, Q, Gt, beta * 2 ** doubling)

    for G in steps():
        if not (np.all(np.isfinite(G)) and _is_pd(G)):
            continue
        if relaxation != 1.0:
            relaxed = _sym(Gt + relaxation * (G - Gt))
            if _is_pd(relaxed - 0.5 * G):  # then relaxed ≻ G/2 ≻ 0
                value = accept(relaxed)
                if value is not None:
                    return value
        value = accept(G)
        if value is not None:
            return value
    return None


def gram_gradient_norm(obj: DKMObjective, theta, Gs) -> float:
    """max over layers of ‖∂ℒ/∂G_ℓ‖_F (0 for the kernel-hyper objective, which has no free Grams)."""
    if obj.objective == "kernel_hyper":
        return 0.0
    Gs = [G.detach().clone().requires_grad_(True) for G in Gs]
    with torch.enable_grad():
        grads = torch.autograd.grad(obj.value(theta.detach(), Gs), Gs)
    return max(float(torch.linalg.norm(g)) for g in grads)


def whiten(obj: DKMObjective, theta, Gs) -> list:
    """W_ℓ = L_ℓ⁻¹ G_ℓ L_ℓ⁻ᵀ with L_ℓ L_ℓᵀ = K(G_ℓ₋₁): the Grams relative to their priors (``colour`` inverts it)."""
    whites, previous = [], obj.G0
    for layer, G in enumerate(Gs):
        L = torch.linalg.cholesky(obj.K(theta, layer, previous))
        Z = torch.linalg.solve_triangular(L, G, upper=False)
        whites.append(_sym(torch.linalg.solve_triangular(L, Z.T, upper=False)))
        previous = G
    return whites


def colour(obj: DKMObjective, theta, whites, G0=None) -> list:
    """G_ℓ = L_ℓ W_ℓ L_ℓᵀ, L_ℓ L_ℓᵀ = K(G_ℓ₋₁), bottom-up: the Grams at θ (and the inputs' Gram ``G0``, by default
    the objective's) with their whitened values held."""
    Gs, previous = [], obj.G0 if G0 is None else G0
    for layer, W in enumerate(whites):
        L = torch.linalg.cholesky(obj.K(theta, layer, previous))
        previous = _sym(L @ W @ L.T)
        Gs.append(previous)
    return Gs


def hyper_step(obj: DKMObjective, theta, Gs, max_iter: int = HYPER_ITERATIONS) -> tuple[torch.Tensor, list]:
    """Ascend ℒ in θ by SciPy's L-BFGS-B on the exact gradient (autograd), at most ``max_iter`` iterations, with the
    *whitened* Grams W_ℓ held (``whiten``): each G_ℓ moves with its prior K(G_ℓ₋₁) as θ changes, and the layer
    terms, −ν KL(N(0, W_ℓ) ‖ N(0, I)) − νP/2, stay put. Returns (θ, Grams). Holding the Grams themselves instead
    couples θ and G so tightly that the sweeps stall: on gal/bostonHousing split 0 ℒ was 120 nats lower after 10
    sweeps and still after 30 (docs/methods/dkm.md, "The θ step"). A fixed point is the same stationary point
    either way (∂ℒ/∂G = 0 there). The kernel-hyper objective has no free Grams: its chain is the prior's.
    (The spec suggests one damped Newton step per sweep; the weights sit 3–10 log-units from their start, and
    trust-region Newton steps needed > 40 sweeps to get half-way on yacht.)
    With an input metric (``obj.input_width``) Ω is ascended here too, as Ω = CCᵀ (C lower triangular), with its
    term L_M(Ω; I): held with the Grams, as App. F's own Riccati step holds them, it cannot move (every Gram above
    is pinned to its prior through it), while with the whitened Grams held it moves like a lengthscale. The new Ω is
    set on ``obj`` (``obj.set_omega``) when the step is taken."""
    free = obj.objective != "kernel_hyper"
    whites = whiten(obj, theta, Gs) if free else None
    # with the whitened Grams held, the DKM's layer terms do not depend on θ, nor do kernel hyper's (−νP/2 each):
    # L-BFGS ascends the data term alone (the layer terms' Cholesky factors and their backward passes were 3/4 of
    # a fit's time at P = 500); the features objective's layer terms keep a log|K(G_ℓ₋₁)| that moves with θ
    objective = obj.value if obj.objective == "features" else obj.data_term
    n_theta, metric = len(theta), obj.input_width is not None
    rows, cols = torch.tril_indices(*obj.omega.shape)

    def split(x) -> tuple:  # (θ, Ω or None) from L-BFGS's vector
        if not metric:
            return x, None
        C = torch.zeros_like(obj.omega).index_put((rows, cols), x[n_theta:])
        return x[:n_theta], C @ C.T

    def f(x):
        x = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        t, omega = split(x)
        try:
            G0 = None if omega is None else obj.input_gram(omega)
            grams = colour(obj, t, whites, G0) if free else None if G0 is None else obj.prior_chain(t, G0)
            value = objective(t, grams) + (obj.input_term(omega) if metric else 0.0)
        except torch.linalg.LinAlgError:  # a trial point with a singular kernel matrix: reject it
            return BAD_OBJECTIVE, np.zeros(len(x))
        grad, = torch.autograd.grad(value, x)
        return -float(value.detach()), -grad.numpy()
    x0 = theta.detach().numpy()
    bounds = obj.hyper_bounds()
    if metric:
        x0 = np.concatenate([x0, torch.linalg.cholesky(obj.omega)[rows, cols].numpy()])
        bounds = bounds + [(None, None)] * len(rows)
    start = f(x0)[0]
    res = scipy.optimize.minimize(f, x0, jac=True, method="L-BFGS-B", bounds=bounds, options={"maxiter": int(max_iter)})
    if res.fun > start:
        return theta.detach(), Gs
    theta, omega = split(torch.tensor(res.x, dtype=torch.float64))
    if metric:
        obj.set_omega(omega)
    with torch.no_grad():
        return theta, (colour(obj, theta, whites) if free else [G.detach() for G in obj.prior_chain(theta)])


def learns_metric(solver: str, learn_hyper: bool, objective: str) -> bool:
    """Whether a fit can learn an input metric Ω: in the θ step of the "newton" or "care" sweeps (``learn_hyper``), for
    the "dkm" and "kernel_hyper" objectives."""
    return solver in METRIC_SOLVERS and learn_hyper and objective != "features"


# SciPy's steps (the Lyapunov and Riccati solves, L-BFGS) run with one BLAS thread: OpenBLAS's threads spin for a
# while after each call and starve the PyTorch (OpenMP) threads of the steps between them. uci/concrete, 2 cores,
# 2 PyTorch threads: a 300-row fit took 48.5 s with both pools at 2 threads, 12.9 s with BLAS at 1 (PyTorch at 1:
# 23.8 s); 800 rows, 3 sweeps: 41.8 s → 33.6 s (docs/methods/dkm.md, "Threads")
@threadpool_limits.wrap(limits=1, user_api="blas")
def fit_dkm(obj: DKMObjective, solver: str = "newton", max_iter: int = 10, lam: float = 5.0, beta: float = 1.0,
            learn_hyper: bool = True, lr: float = 0.01, theta=None, progress=None, hyper_lr: float | None = None,
            relaxation: float = 1.0):
    """Fit the Grams (and θ) of ``obj``; returns (θ, [G_1..G_L], SolverLog). ``solver`` "newton"/"care": ``max_iter``
    top-down sweeps, each followed by an L-BFGS ascent on θ (``hyper_step``); "adam": ``max_iter`` Adam steps at ``lr``
    on G_ℓ = V_ℓV_ℓᵀ (V_ℓ lower triangular, started at the Cholesky factor of the prior Gram) and θ together, θ at
    ``hyper_lr`` when given (the Grams are ill-conditioned: a rate that does not wreck them in the first steps leaves
    θ, where most of the early gain is, almost still; measured on yacht in docs/methods/dkm.md). ``relaxation`` ω
    over-relaxes each layer's update (``update_layer``; 1 = the paper's block coordinate ascent).
    "joint": the first ``JOINT_WARM_SWEEPS`` of the ``max_iter`` iterations are "newton" sweeps, the rest trust-region
    Newton iterations on θ and the Grams together (``_fit_joint``).
    ``progress(log, θ, Grams)`` is called after every iteration (and at the start)."""
    if solver not in SOLVERS:
        raise ValueError(f"unknown solver {solver!r}; use one of {SOLVERS}")
    if solver == "joint" and obj.kernel.name not in SECOND_ORDER_KERNELS:
        raise ValueError(f"solver='joint' takes Newton steps on second derivatives, which the {obj.kernel.name!r} "
                         f"Gram kernel lacks where two rows coincide; use solver='newton' or a kernel of "
                         f"{SECOND_ORDER_KERNELS}")
    if obj.input_width is not None and not learns_metric(solver, learn_hyper, obj.objective):
        raise ValueError(f"a learned input metric (input_width) is fitted in the θ step of the 'newton' or 'care' "
                         f"sweeps (learn_hyper=True), not by solver={solver!r} with learn_hyper={learn_hyper}; use "
                         "one of those or input_width=None")
    theta = obj.initial_theta() if theta is None else torch.as_tensor(theta, dtype=torch.float64).clone()
    obj.clamp_noise(theta)  # a given θ below the floor starts at it
    Gs = [G.detach() for G in obj.prior_chain(theta)]
    log = SolverLog()
    with torch.no_grad():
        log.add(float(obj.value(theta, Gs)), gram_gradient_norm(obj, theta, Gs), 0.0)
    log.report(progress, theta, Gs)
    start, log.paused = time.perf_counter(), 0.0  # the clock starts after the initial evaluation
    if solver == "adam":
        return _fit_adam(obj, theta, Gs, max_iter, lr, lr if hyper_lr is None else hyper_lr, learn_hyper, log, start,
                         progress)
    sweeps = min(int(max_iter), JOINT_WARM_SWEEPS) if solver == "joint" else int(max_iter)
    for _ in range(sweeps):
        value = log.objective[-1]  # ℒ at the current θ and Grams
        if obj.objective != "kernel_hyper":
            for layer in range(obj.n_layers, 0, -1):
                with torch.no_grad():
                    updated = update_layer(obj, theta, Gs, layer, lam, beta, "care" if solver == "care" else "newton",
                                           value, relaxation)
                log.kept += updated is None
                value = value if updated is None else updated
        if learn_hyper:
            omega = obj.omega
            stepped = hyper_step(obj, theta, Gs)
            try:
                with torch.no_grad():
                    stepped_value = float(obj.value(*stepped))  # solver time: the next sweep starts from it
            except torch.linalg.LinAlgError:  # a re-coloured Gram that is not numerically positive definite
                stepped_value = -math.inf
            # the θ step ascends the data term with the whitened Grams held, the layer terms constant in exact
            # arithmetic; on ill-conditioned Grams their round trip through the Cholesky factors is not (30 rows,
            # relaxation 1.6: ℒ fell 5.9 nats; uci/forest mask 8, seed 8: a Gram no longer positive definite), so
            # a step that lowers ℒ itself, or leaves it undefined, is not taken
            if not stepped_value < value:
                (theta, Gs), value = stepped, stepped_value
            else:
                obj.set_omega(omega)  # the input metric goes back with θ
        now = time.perf_counter()
        elapsed = now - start - log.paused  # the gradient norm below is bookkeeping, not solver time
        log.add(value, gram_gradient_norm(obj, theta, Gs), elapsed)
        log.paused += time.perf_counter() - now
        log.report(progress, theta, Gs)
        if not math.isfinite(value):
            raise FloatingPointError(f"the DKM objective became {value}; try a larger lam or beta")
    if solver == "joint" and max_iter > sweeps:
        return _fit_joint(obj, theta, Gs, int(max_iter) - sweeps, learn_hyper, log, start, progress)
    return theta.detach(), Gs, log


def _fit_joint(obj, theta, Gs, iterations, learn_hyper, log, start, progress):
    """Trust-region Newton (SciPy's ``trust-krylov``; Hessian-vector products by autograd) on x = (θ, S_1..S_L),
    the Grams coloured (``colour``) from W_ℓ = M_ℓ (I + S_ℓ) M_ℓᵀ, M_ℓ M_ℓᵀ the whitened Gram at the start (S_ℓ
    symmetrised): each Gram moves with its prior as θ and the layers below change, as in the θ step, and the layer
    terms' curvature in S is ν_ℓ/2 in every direction, so the Krylov solves see the coupling of the layers and θ
    (the data term) on a well-scaled problem. The sweeps' slow modes — the layers pulling on each other, θ
    drifting along a valley where a kernel weight tends to 0 — are what this removes: docs/methods/dkm.md, "Joint
    Newton iterations". log σ² is held where it sits at ``noise_min`` (else trial points below it are refused)."""
    P, free = len(obj.Y), obj.objective != "kernel_hyper"
    bases = [torch.linalg.cholesky(W) for W in whiten(obj, theta, Gs)] if free else []
    theta = theta.detach().clone()
    lo = obj.log_noise_min
    noise_at_floor = lo is not None and float(theta[-1]) <= lo + 1e-9
    n_theta = 0 if not learn_hyper else len(theta) - 1 if noise_at_floor else len(theta)

    def unpack(x):
        t = torch.cat([x[:n_theta], theta[n_theta:]])
        S = x[n_theta:].reshape(len(bases), P, P)
        whites = [M @ (obj.eye + _sym(S_l)) @ M.T for M, S_l in zip(bases, S)]
        return t, (colour(obj, t, whites) if free else None)

    def value(x):
        t, grams = unpack(x)
        if lo is not None and float(t[-1].detach()) < lo:
            raise torch.linalg.LinAlgError("below the noise floor")
        return obj.value(t, grams)

    def f(x):
        x = torch.tensor(x, requires_grad=True)
        try:
            v = value(x)
        except torch.linalg.LinAlgError:  # a trial point off the cone or below the floor: refused
            return BAD_OBJECTIVE, np.zeros(len(x))
        grad, = torch.autograd.grad(v, x)
        return -float(v.detach()), -grad.numpy()

    def hessp(x, p):
        x = torch.tensor(x, requires_grad=True)
        grad, = torch.autograd.grad(value(x), x, create_graph=True)
        return -torch.autograd.grad(grad, x, grad_outputs=torch.tensor(p))[0].numpy()

    state = {"theta": theta, "Gs": Gs}

    def record(xk):
        now = time.perf_counter()
        elapsed = now - start - log.paused
        with torch.no_grad():
            t, grams = unpack(torch.as_tensor(xk))
            grams = [G.detach() for G in (grams if free else obj.prior_chain(t))]
            state.update(theta=t.detach(), Gs=grams)
            log.add(float(obj.value(t, grams)), gram_gradient_norm(obj, t, grams), elapsed)
        log.paused += time.perf_counter() - now  # bookkeeping, not solver time
        log.report(progress, t, grams)
    x0 = np.concatenate([theta[:n_theta].numpy(), np.zeros(len(bases) * P * P)])
    if not len(x0):  # kernel hyper with θ held: nothing to fit
        return theta, Gs, log
    scipy.optimize.minimize(f, x0, jac=True, hessp=hessp, method="trust-krylov", callback=record,
                            options={"maxiter": iterations, "gtol": 1e-10})
    return state["theta"], state["Gs"], log


def _fit_adam(obj, theta, Gs, steps, lr, hyper_lr, learn_hyper, log, start, progress):
    jitter = 1e-8
    V = [torch.linalg.cholesky(G).clone().requires_grad_(True) for G in Gs]
    theta = theta.clone().requires_grad_(learn_hyper)
    opt = torch.optim.Adam([{"params": V, "lr": lr}] + ([{"params": [theta], "lr": hyper_lr}] if learn_hyper else []))
    eye = obj.eye

    def grams():
        return [torch.tril(v) @ torch.tril(v).T + jitter * eye for v in V]
    for _ in range(int(steps)):
        opt.zero_grad(set_to_none=True)
        loss = -obj.value(theta, grams() if obj.objective != "kernel_hyper" else None)
        loss.backward()
        opt.step()
        if learn_hyper:
            obj.clamp_noise(theta)
        now = time.perf_counter()
        elapsed = now - start - log.paused
        with torch.no_grad():
            Gs = [G.detach() for G in grams()] if obj.objective != "kernel_hyper" else \
                [G.detach() for G in obj.prior_chain(theta)]
            value = float(obj.value(theta, Gs))
        log.add(value, math.nan, elapsed)
        log.paused += time.perf_counter() - now
        log.report(progress, theta, Gs)
    return theta.detach(), Gs, log

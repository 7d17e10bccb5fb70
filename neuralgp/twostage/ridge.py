"""Kernel ridge regression, the two-stage mean model: (K + λI)⁻¹y on Gram matrices of the registry's GPyTorch
kernels — the system scikit-learn's KernelRidge solves (the tests compare the two), here one float64 Cholesky in
torch so that the O(n³) steps run on a GPU when asked — its regulariser, kernel and lengthscale chosen by K-fold
cross-validation (the paper's App. F.1 grid; with ``ard``, also one lengthscale per input from a GP's marginal
likelihood), and KRRNN — kernel ridge on each test point's w nearest training
neighbours (Algorithm 6), batched."""

from __future__ import annotations

import math

import numpy as np
import torch
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.model_selection import KFold
from sklearn.neighbors import NearestNeighbors

from neuralgp.kernels import make_kernel
from neuralgp.neighbours import nearest_rows
from neuralgp.twostage.variance import fit_variance_gp

ALPHAS = (1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0)  # App. F.1
KERNEL_NAMES = ("rbf", "matern32", "matern12")
LENGTH_SCALE_FACTORS = (0.25, 0.5, 1.0, 2.0)  # times the median pairwise distance
EDGE_STEPS = 3  # the lengthscale grid grows by factors of 2 past an end that wins, at most this many times
CV_MAX_ROWS = 2000  # the search runs on a random subsample of at most this many rows; the final fit on all
ARD_MAX_ROWS, ARD_STEPS = 500, 150  # the GP giving the ARD candidates: marginal likelihood on ≤ this many CV rows
ARD_FACTORS = (0.5, 1.0, 2.0)  # the ARD candidates: its lengthscales times these


def gram_tensor(kernel: str, length_scale, A, B=None, device="cpu") -> torch.Tensor:
    """k(A, B) of the registry's kernel with unit output scale, a float64 tensor on ``device``; A and B may carry a
    leading batch axis ((b, n, d) and (b, m, d) give (b, n, m)). ``length_scale``: one number, or one per input
    (ARD: the kernel with unit lengthscale on the inputs divided by them)."""
    scales = np.asarray(length_scale, dtype=np.float64)
    A = np.asarray(A, dtype=np.float64)
    B = A if B is None else np.asarray(B, dtype=np.float64)
    if scales.ndim:
        A, B, scales = A / scales, B / scales, 1.0
    k = make_kernel(kernel, lengthscale=float(scales)).to(device=device, dtype=torch.float64)
    k.outputscale = 1.0
    A, B = torch.as_tensor(A, device=device), torch.as_tensor(B, device=device)
    with torch.no_grad():
        return k(A, B).to_dense()


def gram(kernel: str, length_scale: float, A, B=None) -> np.ndarray:
    """``gram_tensor`` on the CPU as a NumPy array (for scikit-learn's precomputed kernels)."""
    return gram_tensor(kernel, length_scale, A, B).numpy()


def median_distance(X, seed: int = 0, max_rows: int = 1000) -> float:
    """Median Euclidean distance between distinct rows (of a random subsample of at most ``max_rows``)."""
    X = np.asarray(X, dtype=np.float64)
    if len(X) > max_rows:
        X = X[np.random.default_rng(seed).choice(len(X), max_rows, replace=False)]
    d = np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1))[np.triu_indices(len(X), 1)]
    d = d[d > 0]
    return float(np.median(d)) if len(d) else 1.0


def ard_hyperparameters(X, y, kernel: str, seed: int = 0, device="cpu",
                        steps: int = ARD_STEPS) -> tuple[np.ndarray, float]:
    """(one lengthscale per input, λ = σ²/σ_f²) of the zero-mean GP with ``kernel`` fitted to (X, y) by its
    marginal likelihood (``fit_variance_gp``, ``steps`` full-data steps, lengthscales started at √d): with them,
    kernel ridge equals that GP's posterior mean."""
    model, _ = fit_variance_gp(X, y, kernel, warm_start=None, seed=seed, subsample_steps=steps, device=device,
                               ard=True, lengthscale=math.sqrt(np.shape(X)[1]))
    k = model.covar_module
    scales = k.base_kernel.lengthscale.detach().cpu().numpy().ravel()
    return scales, float(model.likelihood.noise.detach()) / float(k.outputscale.detach())


def cv_mse(K, y, splits, alphas) -> np.ndarray:
    """The K-fold cross-validated MSE of kernel ridge on the Gram matrix ``K`` (array or tensor; the work runs where
    a tensor lives) for every λ in ``alphas``: the mean over folds of each fold's MSE, what
    GridSearchCV(KernelRidge(kernel="precomputed"), scoring=MSE) gives, from one eigendecomposition per fold instead
    of one solve per fold and λ (eigenvalues clipped at 0 against round-off; six λ, 1 thread: 4× faster than
    GridSearchCV at 300 rows, 1.8× at 1000, even at 2000)."""
    K = torch.as_tensor(K, dtype=torch.float64)
    y = torch.as_tensor(np.asarray(y, dtype=np.float64), device=K.device)
    out = torch.zeros(len(alphas), dtype=torch.float64, device=K.device)
    for train, test in splits:
        train, test = torch.as_tensor(train, device=K.device), torch.as_tensor(test, device=K.device)
        e, V = torch.linalg.eigh(K[train][:, train])
        Vy, KV, e = V.T @ y[train], K[test][:, train] @ V, e.clamp_min(0.0)
        for j, alpha in enumerate(alphas):
            out[j] += torch.mean((y[test] - KV @ (Vy / (e + alpha))) ** 2)
    return (out / len(splits)).cpu().numpy()


class KernelRidgeCV(RegressorMixin, BaseEstimator):
    """Kernel ridge with its regulariser λ (``alphas``), kernel (``kernels``) and lengthscale (``length_scales``,
    times the median pairwise distance) chosen by ``cv``-fold cross-validated MSE. ``ard``: the candidates also
    include, for each kernel, one lengthscale per input — those of the GP fitted by marginal likelihood to at most
    ``ARD_MAX_ROWS`` of the CV rows (``ard_hyperparameters``, ``ard_steps`` steps), times each of ``ARD_FACTORS``,
    with that GP's λ = σ²/σ_f² beside the grid's (``length_scale_`` is then a tuple; the same folds choose, each
    scoring a GP fitted without its held-out rows: ``_score_ard``). When the best lengthscale is the grid's largest
    (smallest), the grid grows by a factor of 2 past that end, up to ``edge_steps`` times:
    nearly linear data (uci/concreteslump, machine, pendulum) want 8–16 × the median distance, and a grid that
    stops at 2 × left their mean model's test RMSE 16–91 % higher (split 0; docs/methods/twostage.md). Fitted:
    ``kernel_``, ``alpha_``, ``length_scale_``, ``cv_mse_`` {(kernel, length_scale, alpha): MSE}, and with
    ``refit`` (the final O(n³) fit on all rows) ``dual_coef_`` and ``X_fit_`` (with ``loo``, also the exact
    leave-one-out residuals ``loo_residuals_`` from the same Cholesky factor); ``refit=False`` only chooses the
    hyper-parameters (what KRRNN needs). ``device``: where the Gram matrices, eigendecompositions and Cholesky
    factors are computed (float64 torch; "cuda" for the O(n³) steps at large n); fitted arrays are NumPy."""

    def __init__(self, kernels=KERNEL_NAMES, alphas=ALPHAS, length_scales=LENGTH_SCALE_FACTORS,
                 edge_steps=EDGE_STEPS, cv=5, refit=True, loo=False, ard=False, ard_steps=ARD_STEPS, seed=0,
                 device="cpu"):
        self.kernels = kernels
        self.alphas = alphas
        self.length_scales = length_scales
        self.edge_steps = edge_steps
        self.cv = cv
        self.refit = refit
        self.loo = loo
        self.ard = ard
        self.ard_steps = ard_steps
        self.seed = seed
        self.device = device

    def fit(self, X, y):
        X, y = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
        rng = np.random.default_rng(self.seed)
        rows = rng.choice(len(y), CV_MAX_ROWS, replace=False) if len(y) > CV_MAX_ROWS else np.arange(len(y))
        scale = median_distance(X[rows], self.seed)
        splits = list(KFold(min(int(self.cv), len(rows)), shuffle=True, random_state=self.seed).split(rows))
        self.cv_mse_ = {}

        def score(kernel, length_scale, alphas):
            mse = cv_mse(gram_tensor(kernel, length_scale, X[rows], device=self.device), y[rows], splits, alphas)
            for alpha, value in zip(alphas, mse):
                self.cv_mse_[(kernel, length_scale, float(alpha))] = float(value)

        def search(factors):
            for kernel in self.kernels:
                for factor in factors:
                    score(kernel, factor * scale, self.alphas)
            return min(self.cv_mse_, key=self.cv_mse_.get)

        factors = sorted(self.length_scales)
        best = search(factors)
        for _ in range(int(self.edge_steps) if len(factors) > 1 else 0):  # one factor: a fixed lengthscale
            if best[1] == factors[-1] * scale:
                factors.append(2 * factors[-1])
                best = search(factors[-1:])
            elif best[1] == factors[0] * scale:
                factors.insert(0, factors[0] / 2)
                best = search(factors[:1])
            else:
                break
        if self.ard:
            self._score_ard(X, y, rows, rng.permutation(len(rows))[:ARD_MAX_ROWS], splits)
            best = min(self.cv_mse_, key=self.cv_mse_.get)
        self.kernel_, self.length_scale_, self.alpha_ = best
        return self.fit_chosen(X, y, self.loo) if self.refit else self

    def _score_ard(self, X, y, rows, sub, splits):
        """The ARD candidates' CV MSE, out of fold: in each fold the GP that gives the lengthscales and its λ is
        fitted to the fold's training rows among ``rows[sub]`` only, so the held-out rows never shape the candidate
        they score (fitted once on all of ``rows[sub]``, the lengthscales had seen them: on sets of 100–250 rows the
        search then took ARD where it did not generalise). The candidates keep the lengthscales and λ of the GP
        fitted to all of ``rows[sub]``, for the final fit. Every kernel's candidates (3 × 6 GP fits): ARD for the
        grid's winning kernel only, or for the kernel of the highest marginal likelihood, halved the cost and lost
        the better candidate on uci/pendulum and uci/parkinsons (docs/methods/twostage.md)."""
        in_sub = np.zeros(len(rows), dtype=bool)
        in_sub[sub] = True
        grid = [float(a) for a in self.alphas]
        for kernel in self.kernels:
            scales, alpha = ard_hyperparameters(X[rows[sub]], y[rows[sub]], kernel, self.seed, self.device,
                                                self.ard_steps)
            keys = [(tuple(float(v) for v in factor * scales), a) for factor in ARD_FACTORS for a in [*grid, alpha]]
            total = np.zeros(len(keys))
            for train, test in splits:
                fit_rows = rows[train[in_sub[train]]]
                fold_scales, fold_alpha = ard_hyperparameters(X[fit_rows], y[fit_rows], kernel, self.seed, self.device,
                                                              self.ard_steps)
                total += np.concatenate([cv_mse(gram_tensor(kernel, factor * fold_scales, X[rows], device=self.device),
                                                y[rows], [(train, test)], [*grid, fold_alpha])
                                         for factor in ARD_FACTORS])
            for (length_scale, a), value in zip(keys, total / len(splits)):
                self.cv_mse_[(kernel, length_scale, a)] = float(value)

    def _cholesky(self) -> torch.Tensor:
        """The Cholesky factor of K + λI at the training rows, on ``device``."""
        K = gram_tensor(self.kernel_, self.length_scale_, self.X_fit_, device=self.device)
        return torch.linalg.cholesky(K + self.alpha_ * torch.eye(len(K), dtype=K.dtype, device=K.device))

    def fit_chosen(self, X, y, loo: bool = False) -> "KernelRidgeCV":
        """The final fit: kernel ridge with the chosen ``kernel_``, ``length_scale_`` and ``alpha_`` on all rows,
        (K + λI)⁻¹y by one Cholesky solve (scikit-learn's KernelRidge solves the same system on the CPU); with
        ``loo`` also ``loo_residuals_`` from the same factor."""
        self.X_fit_ = np.asarray(X, dtype=np.float64)
        L = self._cholesky()
        y = torch.as_tensor(np.asarray(y, dtype=np.float64), device=L.device)
        self.dual_coef_ = torch.cholesky_solve(y[:, None], L)[:, 0].cpu().numpy()
        self.loo_residuals_ = self._leave_one_out(L) if loo else None
        return self

    def _leave_one_out(self, L: torch.Tensor) -> np.ndarray:
        """Exact leave-one-out residuals at the training rows, no refits: with A = (K + λI)⁻¹ = (LLᵀ)⁻¹, the
        residual of row i from the same λ, kernel and lengthscale fitted without it is (A y)_i / A_ii, and A y is
        ``dual_coef_``. One n × n Cholesky inverse."""
        return self.dual_coef_ / torch.diagonal(torch.cholesky_inverse(L)).cpu().numpy()

    def loo_residuals(self) -> np.ndarray:
        """The fitted model's exact leave-one-out residuals (``loo_residuals_``, computed now if the fit did not)."""
        if getattr(self, "loo_residuals_", None) is None:
            self.loo_residuals_ = self._leave_one_out(self._cholesky())
        return self.loo_residuals_

    def predict(self, X):
        """k(X, X_fit) · dual coefficients, as ``KernelRidge.predict``."""
        K = gram_tensor(self.kernel_, self.length_scale_, np.asarray(X, dtype=np.float64), self.X_fit_, self.device)
        return (K @ torch.as_tensor(self.dual_coef_, device=K.device)).cpu().numpy()


class KRRNNRegressor(RegressorMixin, BaseEstimator):
    """KRRNN: at each point, kernel ridge (``kernel``, ``length_scale``, λ = ``alpha``) on its ``n_neighbors``
    nearest training rows; ``exclude_self`` leaves a training point out of its own neighbourhood (leave-one-out
    residuals, the spec's choice for Algorithm 6 line 3). Solved in batches of ``batch_size`` points."""

    def __init__(self, kernel="rbf", length_scale=1.0, alpha=1e-3, n_neighbors=50, batch_size=1024):
        self.kernel = kernel
        self.length_scale = length_scale
        self.alpha = alpha
        self.n_neighbors = n_neighbors
        self.batch_size = batch_size

    def fit(self, X, y):
        if int(self.n_neighbors) < 1:
            raise ValueError(f"n_neighbors must be >= 1, got {self.n_neighbors}")
        self.X_fit_, self.y_fit_ = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
        self.index_ = NearestNeighbors().fit(self.X_fit_)
        return self

    def predict(self, X, exclude_self: bool = False):
        """``exclude_self``: X are the training rows, in order, each predicted without itself (``nearest_rows``)."""
        X = np.asarray(X, dtype=np.float64)
        w = min(int(self.n_neighbors), len(self.y_fit_) - int(exclude_self))
        out = np.empty(len(X))
        for start in range(0, len(X), int(self.batch_size)):
            Xb = X[start:start + int(self.batch_size)]
            idx = nearest_rows(self.index_, Xb, w, np.arange(start, start + len(Xb)) if exclude_self else None)
            XN, yN = self.X_fit_[idx], self.y_fit_[idx]  # (b, w, d), (b, w)
            K = gram(self.kernel, self.length_scale, XN) + self.alpha * np.eye(w)
            k_star = gram(self.kernel, self.length_scale, Xb[:, None, :], XN)[:, 0, :]  # (b, w)
            out[start:start + len(Xb)] = (k_star * np.linalg.solve(K, yN[..., None])[..., 0]).sum(-1)
        return out


def ridge_state(model) -> dict:
    """What a fitted KernelRidgeCV or KRRNNRegressor needs to predict, as tensors and numbers (for ``save``)."""
    if isinstance(model, KRRNNRegressor):
        return {"params": model.get_params(), "X": torch.as_tensor(model.X_fit_), "y": torch.as_tensor(model.y_fit_)}
    return {"kernel": model.kernel_, "length_scale": model.length_scale_, "alpha": model.alpha_,
            "X": torch.as_tensor(model.X_fit_), "dual_coef": torch.as_tensor(model.dual_coef_)}


def ridge_from_state(state: dict, device="cpu"):
    """The predicting model back from ``ridge_state`` (a KernelRidgeCV predicting on ``device``)."""
    if "params" in state:
        return KRRNNRegressor(**state["params"]).fit(state["X"].numpy(), state["y"].numpy())
    model = KernelRidgeCV(device=device)
    model.kernel_, model.length_scale_, model.alpha_ = state["kernel"], state["length_scale"], state["alpha"]
    model.X_fit_, model.dual_coef_ = state["X"].numpy(), state["dual_coef"].numpy()
    return model


def refit_kernel_ridge(model, X, y, loo: bool = False):
    """A fitted KernelRidgeCV or KRRNNRegressor's hyper-parameters fitted to other rows (no search; ``loo``: a
    KernelRidgeCV keeps its leave-one-out residuals)."""
    if isinstance(model, KRRNNRegressor):
        return KRRNNRegressor(**model.get_params()).fit(X, y)
    refit = KernelRidgeCV(device=model.device)
    refit.kernel_, refit.length_scale_, refit.alpha_ = model.kernel_, model.length_scale_, model.alpha_
    return refit.fit_chosen(X, y, loo)


def fit_kernel_ridge(X, y, n_neighbors: int | None = None, seed: int = 0, alphas=ALPHAS, device="cpu",
                     loo: bool = False, ard: bool = False, ard_steps: int = ARD_STEPS):
    """Kernel ridge on all rows (``n_neighbors`` None: KernelRidgeCV, O(n³)) or KRRNN on ``n_neighbors`` with the
    hyper-parameters KernelRidgeCV chooses on its subsample (the scalable pipeline, Algorithm 6 line 2; KRRNN's
    small solves stay on the CPU); ``loo``: KernelRidgeCV keeps its leave-one-out residuals; ``ard``: its search
    also has the ARD candidates (their GPs fitted in ``ard_steps`` steps)."""
    if n_neighbors is None:
        return KernelRidgeCV(alphas=alphas, loo=loo, ard=ard, ard_steps=ard_steps, seed=seed, device=device).fit(X, y)
    cv = KernelRidgeCV(alphas=alphas, refit=False, ard=ard, ard_steps=ard_steps, seed=seed, device=device).fit(X, y)
    return KRRNNRegressor(cv.kernel_, cv.length_scale_, cv.alpha_, n_neighbors).fit(X, y)

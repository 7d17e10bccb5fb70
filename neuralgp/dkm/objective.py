"""The DKM objective (eqs. 14–23) and its two baselines of Table 1, in float64 torch.

ℒ(G_1..G_L) = log N(Y; 0, K_L(G_L) + σ²I) + Σ_ℓ L_M(G_ℓ; G_ℓ₋₁), with the layer term ("mean objective", eq. 22)
L_M(G; G') = (ν/2) log|G| − (ν/2) Tr(K(G')⁻¹G) − (ν/2) log|K(G')| = −ν KL(N(0, G) ‖ N(0, K(G'))) − νP/2.
``"features"`` drops the (ν/2) log|G| term (MAP over features, eq. 18); ``"kernel_hyper"`` fixes G_ℓ = K(G_ℓ₋₁)
(eq. 39), a deep compositional kernel whose only parameters are the kernel weights and σ².

θ = (log w of each of the L + 1 kernel applications K_0..K_L, log σ²), one flat tensor; σ² ≥ ``noise_min``, a bound
the solvers keep (``hyper_bounds``): the learned top Gram can absorb the targets, and without it σ² falls to 0.

With ``input_width`` ν_Ω the inputs' Gram is learned too (App. F, the spec's §3.7): G₀ = XΩXᵀ/ν₀ with a ν₀ × ν₀
input metric Ω ~ W(I/ν_Ω, ν_Ω), whose term L_M(Ω; I) = (ν_Ω/2) log|Ω| − (ν_Ω/2) Tr Ω joins ℒ (the DKM and, as a
control, the kernel-hyper objective).
Ω = I is its prior mean and the model without it; the squared-exponential part of K₀ then sees the learned metric
(x − x')ᵀΩ(x − x')/ν₀, a relevance (and rotation) of the inputs with a Wishart prior.
"""

from __future__ import annotations

import math

import torch

from neuralgp.dkm.kernels import GramKernel

OBJECTIVES = ("dkm", "features", "kernel_hyper")
JITTER = 1e-6  # added to the hidden layers' kernel matrices: K(G₀) of near-duplicate rows is numerically singular


def logdet(A: torch.Tensor) -> torch.Tensor:
    return 2 * torch.log(torch.diagonal(torch.linalg.cholesky(A))).sum()


def layer_term(G, K_prev, nu: float, with_logdet_g: bool = True) -> torch.Tensor:
    """L_M(G; ·) with K_prev = K(G_ℓ₋₁) (eq. 22); without the log|G| term, the features objective's T + D."""
    L = torch.linalg.cholesky(K_prev)
    trace = torch.trace(torch.cholesky_solve(G, L))
    out = -0.5 * nu * trace - nu * torch.log(torch.diagonal(L)).sum()
    return out + 0.5 * nu * logdet(G) if with_logdet_g else out


def log_likelihood(K_y, Y) -> torch.Tensor:
    """Σ over the columns of Y of log N(y; 0, K_y) (eq. 15)."""
    L = torch.linalg.cholesky(K_y)
    P, C = Y.shape
    alpha = torch.cholesky_solve(Y, L)
    return -0.5 * (Y * alpha).sum() - C * torch.log(torch.diagonal(L)).sum() - 0.5 * C * P * math.log(2 * math.pi)


def gaussian_kl(S1, S0) -> torch.Tensor:
    """KL(N(0, S1) ‖ N(0, S0))."""
    P = S1.shape[0]
    return 0.5 * (torch.trace(torch.linalg.solve(S0, S1)) - P + logdet(S0) - logdet(S1))


class DKMObjective:
    """ℒ for inputs X (P × ν₀, G₀ = XXᵀ/ν₀), targets Y (P × C) and widths ν_1..ν_L."""

    def __init__(self, X, Y, widths, kernel: GramKernel, objective: str = "dkm", noise_min: float = 0.0,
                 input_width: float | None = None):
        if objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {objective!r}; use one of {OBJECTIVES}")
        if input_width is not None and objective == "features":
            raise ValueError("input_width (a learned input metric) is for the 'dkm' and 'kernel_hyper' objectives, "
                             "not 'features'; give input_width=None")
        self.X = torch.as_tensor(X, dtype=torch.float64)
        Y = torch.as_tensor(Y, dtype=torch.float64)
        self.Y = Y[:, None] if Y.ndim == 1 else Y
        self.widths = [float(v) for v in widths]
        self.kernel, self.objective, self.noise_min = kernel, objective, float(noise_min)
        self.input_width = None if input_width is None else float(input_width)
        self.set_omega(torch.eye(self.X.shape[1], dtype=torch.float64))
        self.G_out = self.Y @ self.Y.T / self.Y.shape[1]  # G_{L+1} = YYᵀ/ν_{L+1}
        self.eye = torch.eye(len(self.Y), dtype=torch.float64)

    def set_omega(self, omega) -> None:
        """Set the input metric Ω (ν₀ × ν₀; I without ``input_width``) and with it G₀ = XΩXᵀ/ν₀."""
        self.omega = torch.as_tensor(omega, dtype=torch.float64)
        self.G0 = self.input_gram(self.omega)

    def input_gram(self, omega) -> torch.Tensor:
        """G₀ = XΩXᵀ/ν₀ of the training rows (differentiable in Ω)."""
        return self.X @ omega @ self.X.T / self.X.shape[1]

    def input_cross(self, X_test) -> tuple[torch.Tensor, torch.Tensor]:
        """(G₀ between test and training rows, diag G₀ of the test rows) under the current Ω."""
        Xt = torch.as_tensor(X_test, dtype=torch.float64)
        XtO = Xt @ self.omega
        return XtO @ self.X.T / self.X.shape[1], (XtO * Xt).sum(1) / self.X.shape[1]

    def input_term(self, omega=None) -> torch.Tensor | float:
        """L_M(Ω; I) = (ν_Ω/2) log|Ω| − (ν_Ω/2) Tr Ω, the input metric's term of ℒ (0 without ``input_width``)."""
        if self.input_width is None:
            return 0.0
        omega = self.omega if omega is None else omega
        return 0.5 * self.input_width * (logdet(omega) - torch.trace(omega))

    @property
    def n_layers(self) -> int:
        return len(self.widths)

    @property
    def nu_out(self) -> int:
        return self.Y.shape[1]

    def initial_theta(self, weight: float = 0.5, noise: float = 0.1) -> torch.Tensor:
        k = self.kernel.n_weights
        theta = torch.tensor([math.log(weight)] * k * (self.n_layers + 1) + [math.log(noise)], dtype=torch.float64)
        return self.clamp_noise(theta)

    @property
    def log_noise_min(self) -> float | None:
        """log ``noise_min``, the lower bound of θ's last entry (None: unbounded)."""
        return math.log(self.noise_min) if self.noise_min > 0 else None

    def clamp_noise(self, theta: torch.Tensor) -> torch.Tensor:
        """Raise log σ² (θ's last entry) to ``log_noise_min`` in place; returns θ."""
        if self.log_noise_min is not None:
            with torch.no_grad():
                theta[-1].clamp_(min=self.log_noise_min)
        return theta

    def hyper_bounds(self) -> list:
        """(lower, upper) per entry of θ for L-BFGS-B: only log σ² is bounded, below by ``log_noise_min``."""
        return [(None, None)] * (self.kernel.n_weights * (self.n_layers + 1)) + [(self.log_noise_min, None)]

    def unpack(self, theta) -> tuple[list, torch.Tensor]:
        """([w of K_0, …, w of K_L], σ²)."""
        k = self.kernel.n_weights
        w = torch.exp(theta[:-1]).reshape(self.n_layers + 1, k)
        return list(w), torch.exp(theta[-1])

    def K(self, theta, layer: int, G) -> torch.Tensor:
        """K_layer(G) of the training rows: the top one (layer = L) with σ²I, the others with ``JITTER``·I."""
        weights, noise = self.unpack(theta)
        return self.kernel(weights[layer], G) + (noise if layer == self.n_layers else JITTER) * self.eye

    def prior_chain(self, theta, G0=None) -> list:
        """G_ℓ = K(G_ℓ₋₁), ℓ = 1..L (from ``G0``, by default the objective's): the initialisation "from the prior"
        and the kernel-hyper solution."""
        Gs, G = [], self.G0 if G0 is None else G0
        for layer in range(self.n_layers):
            G = self.K(theta, layer, G)
            Gs.append(G)
        return Gs

    def data_term(self, theta, Gs=None) -> torch.Tensor:
        """log N(Y; 0, K_L(G_L) + σ²I), the first term of ℒ (eq. 15), at the Grams ``Gs`` (None: the prior chain)."""
        if Gs is None:
            Gs = self.prior_chain(theta)
        return log_likelihood(self.K(theta, self.n_layers, Gs[-1]), self.Y)

    def value(self, theta, Gs=None) -> torch.Tensor:
        """ℒ(G_1..G_L; θ) (for "kernel_hyper" the G's are the prior chain of θ, and ``Gs`` is ignored: each layer
        term is then exactly −νP/2, G_ℓ being K(G_ℓ₋₁), and is not computed)."""
        if self.objective == "kernel_hyper" or Gs is None:
            Gs = self.prior_chain(theta)
        total = log_likelihood(self.K(theta, self.n_layers, Gs[-1]), self.Y) + self.input_term()
        if self.objective == "kernel_hyper":
            return total - 0.5 * len(self.Y) * sum(self.widths)
        previous = self.G0
        for layer, (G, nu) in enumerate(zip(Gs, self.widths)):
            total = total + layer_term(G, self.K(theta, layer, previous), nu, self.objective != "features")
            previous = G
        return total

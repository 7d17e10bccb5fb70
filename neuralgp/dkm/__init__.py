"""Deep kernel machines (Aitchison et al.): learned P × P Gram matrices G_1..G_L between a fixed input Gram and a
GP likelihood, fitted by the Riccati / Lyapunov block-coordinate solver. Their own module beside the weight-space
engine: no features, no posterior over weights."""

from neuralgp.dkm.kernels import GRAM_KERNELS, GramKernel
from neuralgp.dkm.objective import DKMObjective
from neuralgp.dkm.solver import SolverLog, fit_dkm

__all__ = ["GRAM_KERNELS", "GramKernel", "DKMObjective", "SolverLog", "fit_dkm"]

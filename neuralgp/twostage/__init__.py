"""Two-stage GPR (the paper's Algorithms 1–7): a kernel-ridge mean and a GP variance on the residuals, built from
scikit-learn (kernel ridge, nearest neighbours) and GPyTorch kernels (``neuralgp.kernels``). Components, each usable
on its own: farthest-point sampling (``sampling``), kernel ridge with cross-validation and its nearest-neighbour
form KRRNN (``ridge``), the Δ-ratio test and automatic kernel search (``kernel_search``), the heteroscedastic
noise shape (``noise``)."""

from neuralgp.twostage.kernel_search import DeltaTest, automatic_kernel_search, delta_ratio_test
from neuralgp.twostage.noise import NoiseShape
from neuralgp.twostage.ridge import KernelRidgeCV, KRRNNRegressor, gram
from neuralgp.twostage.sampling import farthest_point_sampling

__all__ = ["farthest_point_sampling", "KernelRidgeCV", "KRRNNRegressor", "gram", "delta_ratio_test", "DeltaTest",
           "automatic_kernel_search", "NoiseShape"]

"""DKM prediction (the spec's rebuilt Algorithm 2, App. E): test rows are carried through the layers by the
conditional expectation of their features given the training rows',
G_ti = K_ti K_ii⁻¹ G_ii (eq. 98),  diag G_tt = diag(K_ti K_ii⁻¹ G_ii K_ii⁻¹ K_it) + diag(K_tt − K_ti K_ii⁻¹ K_it)
(eq. 100), with the learned training Grams G_ii; then a GP predictive under K_L + σ²I. Only G_ti and diag G_tt are
formed (elementwise kernels need no more), so memory is O(P_t · P_i) and test rows can be batched."""

from __future__ import annotations

import torch

from neuralgp.dkm.objective import DKMObjective


def predict(obj: DKMObjective, theta, Gs: list, X_test):
    """(mean (P_t × C), variance of f (P_t), variance of y (P_t)) at the test inputs."""
    weights, noise = obj.unpack(theta)
    kernel = obj.kernel
    G_ii = obj.G0
    G_ti, d_t = obj.input_cross(X_test)  # the input layer is deterministic given Ω: exact for test rows
    with torch.no_grad():
        for layer in range(obj.n_layers + 1):
            w = weights[layer]
            d_i = torch.diagonal(G_ii)
            K_ii = obj.K(theta, layer, G_ii)  # with σ²I on top, the jitter below
            K_ti = kernel.block(w, G_ti, d_t, d_i)
            k_tt = kernel.diag(w, d_t)
            if layer == obj.n_layers:
                L = torch.linalg.cholesky(K_ii)
                C = torch.cholesky_solve(K_ti.T, L).T  # K_ti (K_ii + σ²I)⁻¹
                mean = C @ obj.Y
                var_f = (k_tt - (C * K_ti).sum(1)).clamp_min(0)
                return mean, var_f, var_f + noise
            C = torch.cholesky_solve(K_ti.T, torch.linalg.cholesky(K_ii)).T  # K_ti K_ii⁻¹
            G_next = Gs[layer]
            CG = C @ G_next
            d_t = (CG * C).sum(1) + (k_tt - (C * K_ti).sum(1)).clamp_min(0)
            G_ii, G_ti = G_next, CG

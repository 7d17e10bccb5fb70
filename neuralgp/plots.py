"""Pictures people would rather look at than read: 1-D posteriors and learned kernels."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def posterior_and_kernel(panels, X_train, y_train, grid, truth, path):
    """One row per fitted 1-D model: posterior mean ± 2σ with data and truth, and k(x1, x2) on the grid.

    ``panels`` is a list of (title, model); models need ``predict`` and ``features``.
    """
    fig, axes = plt.subplots(len(panels), 2, figsize=(10, 3.2 * len(panels)), squeeze=False,
                             gridspec_kw={"width_ratios": [1.6, 1]})
    G = grid.reshape(-1, 1)
    for (title, model), (ax_post, ax_kern) in zip(panels, axes):
        mean, std = model.predict(G, return_std=True)
        ax_post.scatter(X_train[:, 0], y_train, s=3, c="0.6", label="training data")
        ax_post.plot(grid, truth, "k--", lw=1, label="true f")
        ax_post.plot(grid, mean, "C0", lw=1.5, label="posterior mean")
        ax_post.fill_between(grid, mean - 2 * std, mean + 2 * std, color="C0", alpha=0.25, label="±2σ (y)")
        ax_post.set_title(title)
        ax_post.set_xlim(grid[0], grid[-1])
        phi = model.features(G)
        kernel = phi @ phi.T
        prior_var = getattr(model, "max_prior_variance_", None)
        if prior_var is not None:  # the corrected kernel's diagonal c(x,x) (eq. 12)
            kernel[np.diag_indices_from(kernel)] = np.maximum(prior_var, np.diag(kernel))
        im = ax_kern.imshow(kernel, origin="lower", extent=[grid[0], grid[-1], grid[0], grid[-1]], cmap="viridis")
        ax_kern.set_title("learned kernel k(x1, x2)")
        ax_kern.set_xlabel("x1")
        ax_kern.set_ylabel("x2")
        fig.colorbar(im, ax=ax_kern, fraction=0.046)
    axes[0, 0].legend(loc="lower left", fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

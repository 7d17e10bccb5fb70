"""Two-stage mean model: test RMSE of kernel ridge with the paper's grid (mean="krr") against the grid plus the
ARD candidates (mean="krr-ard"), Gal's splits, standardised targets; prints one TSV line per split."""
import sys, time, numpy as np, torch
torch.set_num_threads(1)
from neuralgp.datasets import load
from neuralgp.twostage.ridge import fit_kernel_ridge
name, splits = sys.argv[1], [int(k) for k in sys.argv[2].split(",")]
for k in splits:
    d = load(name, f"gal:{k}", seed=k)
    X, y = np.vstack([d.X_train, d.X_val]), np.concatenate([d.y_train, d.y_val])
    mu, sd = X.mean(0), X.std(0) + 1e-12; ym, ys = y.mean(), y.std()
    X, Xt = (X - mu) / sd, (d.X_test - mu) / sd; y, yt = (y - ym) / ys, (d.y_test - ym) / ys
    out = [name, str(k)]
    for ard in (False, True):
        t = time.perf_counter(); m = fit_kernel_ridge(X, y, ard=ard)
        rmse = np.sqrt(np.mean((m.predict(Xt) - yt) ** 2))
        ls = "ard" if np.ndim(m.length_scale_) else f"{m.length_scale_:.3g}"
        out += [f"{rmse:.4f}", f"{rmse * ys:.4f}", m.kernel_, ls, f"{m.alpha_:.2g}", f"{time.perf_counter() - t:.1f}"]
    print("\t".join(out), flush=True)

"""Does the rank-1 GP objective (DBK-cr) learn slower than the same network trained by plain MSE?

Same split, scaling, backbone (ResNet, depth 2 unless --depth, width 128, tanh, 1 output), Adam lr 1e-3 with
weight decay 1e-4 on the network, full batch. Prints test RMSE (standardised targets) every ``--every`` iterations as JSON lines.
DBK-cr's prediction is the exact posterior mean β·φ(x) at that iteration (no early stopping).

    OMP_NUM_THREADS=1 python benchmarks/rank1_vs_mse.py --model dbk-cr --iters 10000 > dbk-cr.jsonl
    OMP_NUM_THREADS=1 python benchmarks/rank1_vs_mse.py --model mse --iters 10000 > mse.jsonl
"""

import argparse
import json
import time

import torch

from neuralgp import datasets
from neuralgp.datasets.scaling import Scaler
from neuralgp.models.dbk import DBKRegressor, exact_objective
from neuralgp.posterior import ExactPosterior, gram_stats
from neuralgp.train import adam

parser = argparse.ArgumentParser()
parser.add_argument("--model", choices=("dbk-cr", "mse"), required=True)
parser.add_argument("--dataset", default="uci/pol")
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--iters", type=int, default=10000)
parser.add_argument("--every", type=int, default=500)
parser.add_argument("--depth", type=int, default=2, help="backbone depth: residual blocks after the input layer")
args = parser.parse_args()

ds = datasets.load(args.dataset, split="random", seed=args.seed)
xs, ys = Scaler("minmax").fit(ds.X_train), Scaler("standard").fit(ds.y_train[:, None])
X, Xte = (torch.as_tensor(xs.transform(a), dtype=torch.float32) for a in (ds.X_train, ds.X_test))
y, yte = (torch.as_tensor(ys.transform(a[:, None])[:, 0]) for a in (ds.y_train, ds.y_test))
est = DBKRegressor(rank=1, variance_correction=False, depth=args.depth, seed=args.seed)
torch.manual_seed(args.seed)
module = est.build_module(X.shape[1])  # rank 1, no correction: free features, no trace term
opt = adam(module, module.net, est.lr, est.weight_decay)
n = len(y)


def test_rmse() -> float:
    with torch.no_grad():
        if args.model == "mse":
            mean = module.net(Xte)[:, 0].double()
        else:
            mean = ExactPosterior(gram_stats(module(X), y), module.noise()).predict(module(Xte))[0]
    return float(torch.sqrt(((mean - yte) ** 2).mean()))


t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    opt.zero_grad(set_to_none=True)
    if args.model == "mse":
        loss = ((module.net(X)[:, 0] - y.float()) ** 2).mean()
    else:
        loss = -exact_objective(module, X, y, trace_regulariser=False) / n
    loss.backward()
    opt.step()
    if it % args.every == 0:
        print(json.dumps({"model": args.model, "dataset": args.dataset, "seed": args.seed, "depth": args.depth,
                          "iteration": it,
                          "test_rmse": test_rmse(), "loss": loss.item(), "noise": module.noise().item(),
                          "seconds": time.perf_counter() - t0, "threads": torch.get_num_threads(),
                          "torch": torch.__version__}), flush=True)

"""Does the DAK paper's Table 2 carry each model from one fold to the next? Its code (warrenzha/dak2bnn at 70c2e5e,
``examples/uci/run_uci.py``, ``experiment_setup``) calls ``UCIModel.model_setup()`` once, before the loop over the
five folds, and ``UCIModel.train`` then trains ``self.model`` again on every fold with a new Adam: fold k's model
starts from fold k−1's trained weights. Fold k's test rows lie in the training part of every other fold, so from
fold 1 on the model has been trained on its own test rows, and for (k + 1)·100 epochs.

This script fits the paper's settings (``dak-table2``'s "NN" and "DAK-CF" rows: lr 1e-3, weight decay 5e-4, 100
epochs, batch 512) both ways on the suite's folds (KFold(5, shuffle=True, random_state=10)): "fresh", a new model
per fold (the suite's protocol), and "carried", each fold starting from the previous fold's fitted module (the
paper's code). Both train on the fold's whole training part (the reference code holds nothing out), no early
stopping, no recalibration; the seed is the fold. One TSV row per fold on stdout: test RMSE in the data's units and
the paper's NLPD (every variance + 0.69325, ``neuralgp.bench.evaluate``).

    NEURALGP_DATA=../shared/data OMP_NUM_THREADS=1 python benchmarks/dak_fold_carryover.py uci/kin40k --model NN
"""

from __future__ import annotations

import argparse
import copy

import numpy as np

from neuralgp import datasets
from neuralgp.bench.evaluate import DAK_PAPER_NOISE
from neuralgp.bench.suites.dak import PAPER_DAK, PAPER_NN
from neuralgp.datasets.splits import KFOLDS
from neuralgp.metrics import nll, rmse
from neuralgp.models import DAKRegressor, NetworkRegressor


class CarriedNetwork(NetworkRegressor):
    """The plain network, starting from ``carried`` (a fitted module) when it is set."""
    carried = None

    def _new_module(self, in_dim):
        return copy.deepcopy(self.carried) if self.carried is not None else super()._new_module(in_dim)


class CarriedDAK(DAKRegressor):
    """DAK, starting from ``carried`` (a fitted module) when it is set."""
    carried = None

    def build_module(self, in_dim):
        return copy.deepcopy(self.carried) if self.carried is not None else super().build_module(in_dim)


MODELS = {"NN": (CarriedNetwork, PAPER_NN),
          "DAK-CF": (CarriedDAK, {**PAPER_DAK, "validation_fraction": 0.0, "recalibration": False})}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("sets", nargs="+")
    parser.add_argument("--model", choices=sorted(MODELS), required=True)
    args = parser.parse_args()
    cls, params = MODELS[args.model]
    print("set\tmodel\tprotocol\tfold\trmse\tnlpd_plus_0693\tcumulative_epochs")
    for name in args.sets:
        folds = [datasets.load(name, split=f"kfold:{fold}", seed=fold) for fold in range(KFOLDS)]
        for protocol in ("fresh", "carried"):
            module = None
            for fold, ds in enumerate(folds):
                X = np.concatenate([ds.X_train, ds.X_val])
                y = np.concatenate([ds.y_train, ds.y_val])
                est = cls(seed=fold, verbose=False, **params)
                est.carried = module if protocol == "carried" else None
                est.fit(X, y)
                module = est.module_
                mean, std = est.predict(ds.X_test, return_std=True)
                epochs = params["max_epochs"] * (fold + 1 if protocol == "carried" else 1)
                print(f"{name}\t{args.model}\t{protocol}\t{fold}\t{rmse(ds.y_test, mean):.4f}\t"
                      f"{nll(ds.y_test, mean, np.sqrt(std ** 2 + DAK_PAPER_NOISE)):.4f}\t{epochs}", flush=True)


if __name__ == "__main__":
    main()

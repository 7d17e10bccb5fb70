"""Command line: `neuralgp demo | fit | predict | bench | datasets`."""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import warnings
from pathlib import Path

from neuralgp.errors import NeuralGPError
from neuralgp.params import POSITIVE, POSITIVE_INT

DATA_ROOT_HELP = "data folder (default $NEURALGP_DATA, else ~/.cache/neuralgp)"


def _argument_type(cast, rule):
    """argparse type: ``cast(text)`` checked by an estimator parameter rule of ``neuralgp.params`` (a bad value is
    a one-line usage error, not a traceback from the model)."""
    def parse(text: str):
        try:
            value = cast(text)
        except ValueError:
            value = None
        if value is None or not rule.accepts(value):
            raise argparse.ArgumentTypeError(f"must be {rule.text}, got {text!r}")
        return value
    return parse


_positive_int = _argument_type(int, POSITIVE_INT)
_positive_float = _argument_type(float, POSITIVE)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="neuralgp", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("demo", help="1-D step function: DBK with and without the variance correction (Figure 1)")
    d.add_argument("--out", default="demo_output", help="folder for step1d.png and metrics.md (default demo_output)")
    d.add_argument("--n", type=int, default=1000, help="training points (default 1000)")
    d.add_argument("--max-iter", type=int, default=3000)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--quiet", action="store_true", help="no progress bars")

    from neuralgp.registry import ESTIMATORS
    model_list = "; ".join(f"{name}: {entry.summary}" for name, entry in ESTIMATORS.items())
    f = sub.add_parser("fit", help="train on a data set, evaluate on its test split, print metrics")
    f.add_argument("--dataset", required=True, help="uci/<set>, gal/<set>, synthetic/step1d or a CSV path")
    f.add_argument("--model", choices=list(ESTIMATORS), default="dbk", metavar="MODEL",
                   help=f"one of {', '.join(ESTIMATORS)} (default dbk). {model_list}")
    f.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="any constructor parameter of the model, e.g. --param num_inducing=256 (repeatable; "
                        "values are Python literals, else strings)")
    f.add_argument("--no-correction", action="store_true",
                   help="dbk, svdbk: disable the variance correction (the -c ablation)")
    f.add_argument("--paper-correction", action="store_true",
                   help="dbk, svdbk: free features with the paper's trace regulariser + diagonal correction "
                        "(default: constant-norm features)")
    f.add_argument("--rank", type=_positive_int, default=None,
                   help="features: r of dbk/svdbk (128), the feature-map width of fmgp (64) or of the deep "
                        "kernels dkl/sdkl/svdkl (2; svdkl-grid: its number of 1-D GPs, 16)")
    f.add_argument("--depth", type=_positive_int, default=None,
                   help="network depth of the models with a backbone (resnet: residual blocks after the input "
                        "layer, mlp: hidden layers; default 2)")
    f.add_argument("--gram-precision", choices=("float64", "mixed", "float32"), default=None,
                   help="dbk: how the training Gram matrix ΦᵀΦ is summed (default mixed; the cached posterior "
                        "for prediction is always float64)")
    f.add_argument("--split", default="random",
                   help="random (70/10/20, default), mask:K, gal:K, holdout:T:V (the FM-GP papers': "
                        "holdout:1000:1000) or kfold:K (fold K = 0..4 of the DAK paper's 5-fold CV)")
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--max-iter", type=int, default=None, help="full-batch training iterations (model default)")
    f.add_argument("--max-epochs", type=int, default=None, help="epochs of mini-batch models (model default)")
    f.add_argument("--lr", type=float, default=None, help="Adam learning rate (model default)")
    f.add_argument("--n", type=int, default=None, help="training size for synthetic/step1d")
    f.add_argument("--target", default="-1", help="target column of a CSV file (name or index, default last)")
    f.add_argument("--targets", default=None, metavar="Y.npy",
                   help="with --dataset X.npy: the targets, one per row. Data larger than memory: the model is "
                        "fitted on --train-rows sampled rows, its posterior conditioned on every training row "
                        "streamed from disk (dbk, dak-exact, fmgp), and tested on the last --test-rows rows")
    f.add_argument("--train-rows", type=_positive_int, default=20000,
                   help="with --targets: rows sampled to train the feature map (default 20000)")
    f.add_argument("--test-rows", type=_positive_int, default=None,
                   help="with --targets: the last rows of the file, held out for testing (default n/10, at most "
                        "100000)")
    f.add_argument("--data-root", default=None, help=DATA_ROOT_HELP)
    f.add_argument("--max-time", type=float, default=None,
                   help="wall-clock budget in seconds; training validates once more and stops")
    f.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda (default cpu)")
    f.add_argument("--checkpoint", default=None, metavar="PATH",
                   help="save the training state to PATH every --checkpoint-every steps (dbk, svdbk, dak, fmgp, the "
                        "GPyTorch regressors); a killed job continues with --resume; the file is removed when the "
                        "fit ends")
    f.add_argument("--checkpoint-every", type=_positive_int, default=100, metavar="N",
                   help="steps (iterations or epochs) between checkpoints (default 100)")
    f.add_argument("--resume", action="store_true",
                   help="continue from --checkpoint when it exists (the same command line), ending as an "
                        "uninterrupted run would")
    f.add_argument("--out", default=None, help="folder to save model.pt and metrics.json")
    f.add_argument("--json", action="store_true", help="print metrics as JSON")
    f.add_argument("--quiet", action="store_true", help="no progress bar")
    f.add_argument("--nproc", type=_positive_int, default=1,
                   help="train in N local worker processes (torch.distributed, gloo on CPU, NCCL on CUDA), each "
                        "on its own block of rows: dbk, svdbk, dak, fmgp, svgp, svdkl (default 1); on several "
                        "machines start `torchrun --nnodes … -m neuralgp fit …` instead (docs/distributed.md)")

    pr = sub.add_parser("predict", help="predict mean and std for the rows of a CSV or .npy file, a chunk at a time")
    pr.add_argument("model_file")
    pr.add_argument("input", help="CSV with the model's input columns (a header line is optional) or an (n, d) .npy")
    pr.add_argument("--output", required=True,
                    help="file to write, .csv: columns mean,std (regressors) or label,p_<class>… (classifiers); "
                         ".npy: the same numbers as an (n, k) float64 array (no label)")

    from neuralgp.bench.suites import SUITES
    b = sub.add_parser("bench", help="benchmark suites (long; results are written with their command)")
    b.add_argument("suite", choices=list(SUITES))
    b.add_argument("--data-root", default=None, help=DATA_ROOT_HELP)
    b.add_argument("--seed", type=int, default=0, help="dbk-speed, dak-toy: seed of the data and the networks")
    b.add_argument("--seeds", default=None, help="comma-separated seeds (default 0,1,2,3,4; --quick: 0)")
    b.add_argument("--datasets", default=None, help="comma-separated, e.g. uci/pol,uci/protein")
    b.add_argument("--models", default=None, help="comma-separated row names, e.g. DBK,SVGP")
    b.add_argument("--quick", action="store_true", help="tiny subsamples and few iterations: a smoke run")
    b.add_argument("--budget", type=float, default=None,
                   help="wall-clock seconds of training per run (default: the suite's, 1800; equal-budget: 120)")
    b.add_argument("--device", default="cpu")
    b.add_argument("--depth", type=_positive_int, default=None,
                   help="network depth of every model that has one (default: each model's own; dbk-speed: DBK's 2)")
    b.add_argument("--max-memory-gb", type=_positive_float, default=None,
                   help="memory budget of every model that has one (default each model's own: 8 for the exact "
                        "GP and DKM, the device's memory for two-stage): a set past it is recorded as "
                        "'skipped: memory'")
    b.add_argument("--out", default=None, help="output folder (default benchmarks/results/SUITE)")
    b.add_argument("--json", action="store_true")
    b.add_argument("--report-only", action="store_true",
                   help="run nothing: rewrite table.md and the plot from OUT/results.jsonl (e.g. after merging runs)")

    ds = sub.add_parser("datasets", help="list every known data set, whether it is here, n and d; or download")
    ds.add_argument("--data-root", default=None, help=DATA_ROOT_HELP)
    ds_sub = ds.add_subparsers(dest="action")
    dl = ds_sub.add_parser("download", help="fetch sets from their public sources and verify them")
    dl.add_argument("names", nargs="*", metavar="NAME", help="e.g. uci/yacht gal/yacht uci_classification/magic")
    dl.add_argument("--all", action="store_true", help="every known set")
    dl.add_argument("--root", default=None, help=DATA_ROOT_HELP + "; created if missing")
    dl.add_argument("--mirror", default=None,
                    help="base URL replacing every source's (paths below it are kept), e.g. a local mirror")
    dl.add_argument("--force", action="store_true", help="download again even if present and verified")
    dl.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def _cmd_demo(args):
    from neuralgp.demo import run_demo
    table, png = run_demo(args.out, n=args.n, max_iter=args.max_iter, seed=args.seed, verbose=not args.quiet)
    print(table)
    print(f"\nwrote {png} and {Path(args.out) / 'metrics.md'}")


def _literal(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _model_params(args, cls: type, in_dim: int) -> dict:
    """Constructor parameters from the command line; one the model does not take is an error from the registry."""
    from neuralgp.registry import parameter_names
    names = parameter_names(cls)
    params = dict(seed=args.seed, verbose=not args.quiet, device=args.device, max_time=args.max_time)
    params = {k: v for k, v in params.items() if k in names}
    width = "rank" if "rank" in names else "feature_dim"
    flags = {"max_iter": args.max_iter, "max_epochs": args.max_epochs, "lr": args.lr, width: args.rank,
             "depth": args.depth, "training_gram_precision": args.gram_precision,
             "variance_correction": False if args.no_correction else None,
             "normalize_features": False if args.paper_correction else None}
    params.update({k: v for k, v in flags.items() if v is not None})
    if args.no_correction and args.paper_correction:
        raise NeuralGPError("--no-correction and --paper-correction exclude each other; pick one")
    for item in args.param:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise NeuralGPError(f"--param {item!r}: write NAME=VALUE, e.g. --param num_inducing=256")
        params[key] = _literal(value)
    if args.checkpoint is not None:
        if "checkpoint" not in names:
            raise NeuralGPError(f"--checkpoint: {cls.__name__} does not write checkpoints; dbk, svdbk, dak, "
                                "fmgp and the GPyTorch regressors do")
        path = Path(args.checkpoint)
        if not args.resume and (path.exists() or any(path.parent.glob(path.name + ".rank*"))):
            raise NeuralGPError(f"checkpoint {path} exists: add --resume to continue that fit, or delete it")
        params.update(checkpoint=str(path), checkpoint_every=args.checkpoint_every)
    elif args.resume:
        raise NeuralGPError("--resume needs --checkpoint PATH (the file the interrupted run wrote)")
    if in_dim == 1 and "backbone" in names and "backbone" not in params:
        params["backbone"] = "mlp"  # the DBK paper's synthetic backbone
    return params


def _cmd_fit(args):
    from neuralgp import distributed
    if distributed.init_from_environment(args.device):  # a worker started by torchrun or --nproc
        with distributed.closing_group():
            _fit_and_report(args, main_worker=distributed.is_main())
        distributed.exit_worker(0)
    return _fit_and_report(args, main_worker=True)


def _fit_and_report(args, main_worker: bool):
    from neuralgp import datasets, distributed, registry
    from neuralgp.bench.evaluate import evaluate_classification, evaluate_regression
    out = Path(args.out) if args.out else None
    if out is not None and out.exists() and not out.is_dir():
        raise NeuralGPError(f"--out {out} exists and is not a folder")
    task = "regression"
    if args.dataset.endswith(".npy") or args.targets is not None:
        model, split, metrics = _fit_streamed(args)
    else:
        ds = datasets.load(args.dataset, split=args.split, seed=args.seed, root=args.data_root, n=args.n,
                           target=args.target)
        cls = registry.estimator_class(args.model, ds.task)
        model = registry.build(args.model, ds.task, **_model_params(args, cls, ds.n_features))
        evaluate = evaluate_regression if ds.task == "regression" else evaluate_classification
        task, split, metrics = ds.task, ds.split, evaluate(model, ds)
    params = {k: v for k, v in model.get_params().items() if v is None or isinstance(v, (bool, int, float, str))}
    if hasattr(model, "uses_normalized_features"):
        params["normalize_features"] = model.uses_normalized_features()
    result = {"dataset": args.dataset, "model": args.model, "estimator": type(model).__name__, "split": split,
              "seed": args.seed, "device": args.device, "params": params, **metrics}
    if distributed.is_distributed():
        result["workers"] = distributed.world()[1]
    if not main_worker:  # only rank 0 prints, writes results and saves the model
        return
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        model.save(out / "model.pt")
        _write_atomic(out / "metrics.json", json.dumps(result, indent=2) + "\n")
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        keys = (("accuracy", "error", "nll", "ece", "brier", "temperature", "train_seconds", "iterations")
                if task == "classification" else
                ("mae", "rmse", "mse", "nll", "crps", "coverage_50", "coverage_90", "coverage_95", "mean_z2",
                 "noise_variance", "variance_scale", "train_seconds", "iterations", "best_iteration",
                 "n_posterior_rows", "inference"))
        for key in (k for k in keys if k in result):  # a streamed fit has no best iteration; only DAK an inference
            value = result[key]
            print(f"{key:>16}: {value:.4f}" if isinstance(value, float) else f"{key:>16}: {value}")
        for kind, nll in result.get("inference_scores", {}).items():
            print(f"{'validation NLL':>16}: {nll:.4f} ({kind})")
        if out is not None:
            print(f"saved {out / 'model.pt'}")


def _fit_streamed(args):
    """``fit --dataset X.npy --targets Y.npy``: rows read from disk in chunks (``evaluate_streaming``)."""
    from neuralgp import registry
    from neuralgp.bench.evaluate import evaluate_streaming
    from neuralgp.datasets.rows import NpyRows
    if not (args.dataset.endswith(".npy") and args.targets and args.targets.endswith(".npy")):
        raise NeuralGPError("streamed rows need --dataset X.npy and --targets Y.npy (numpy.save files); "
                            "for a CSV file give --dataset FILE.csv without --targets")
    rows = NpyRows(args.dataset, args.targets)
    test_rows = args.test_rows or max(1, min(rows.n_rows // 10, 100000))
    cls = registry.estimator_class(args.model, "regression")
    model = registry.build(args.model, "regression", **_model_params(args, cls, rows.n_features))
    split = f"last {test_rows} rows tested; {args.train_rows} sampled rows trained; all others streamed"
    return model, split, evaluate_streaming(model, rows, args.train_rows, test_rows, args.seed)


def _write_atomic(path: Path, text: str):
    from neuralgp.io import write_atomic
    write_atomic(path, lambda tmp: Path(tmp).write_text(text, newline=""))


def _cmd_predict(args):
    from neuralgp.datasets.rows import CsvRows, NpyRows
    from neuralgp.io import load
    model = load(args.model_file)
    rows = NpyRows(args.input) if args.input.endswith(".npy") else CsvRows(args.input, target=None)
    output = model.predict_rows(rows, args.output)
    print(f"wrote {rows.n_rows} predictions to {output}")
    if getattr(model, "predictive_df", None) is not None:
        print(f"the predictive is a Student-t with {model.predictive_df:.3g} degrees of freedom: std is its std, and "
              "its central interval is mean ± neuralgp.metrics.quantile(0.5 + level / 2, df) · std")


def _cmd_bench(args):
    from neuralgp.bench.runner import Suite
    from neuralgp.bench.suites import SUITES
    suite = SUITES[args.suite]
    if not isinstance(suite, Suite):  # a timing or a figure (dbk-speed, dak-toy): run, print, write
        result = suite.run(args.out, seed=args.seed, root=args.data_root, depth=args.depth, quick=args.quick,
                           datasets=args.datasets.split(",") if args.datasets else None)
        print(json.dumps(result, indent=2) if args.json else suite.format(result))
        return
    split = lambda v: v.split(",") if v else None  # noqa: E731
    out = suite.run(args.out or f"benchmarks/results/{args.suite}" + ("-quick" if args.quick else ""),
                    seeds=[int(s) for s in split(args.seeds)] if args.seeds else None,
                    dataset_names=split(args.datasets), model_names=split(args.models), quick=args.quick,
                    budget_s=args.budget, device=args.device, root=args.data_root, report_only=args.report_only,
                    depth=args.depth, max_memory_gb=args.max_memory_gb)
    print((out / "table.md").read_text())
    print(f"wrote {out / 'results.jsonl'}, {out / 'table.md'} and {out / 'metrics.png'}")


def _cmd_datasets(args):
    from neuralgp import datasets
    from neuralgp.datasets import download
    if args.action == "download":
        if args.all == bool(args.names):
            raise NeuralGPError("name the sets to download (e.g. uci/yacht gal/yacht) or give --all, not both")
        root = args.root or args.data_root
        status = download.download(["all"] if args.all else args.names, root=root, mirror=args.mirror,
                                   force=args.force, verbose=not args.quiet)
        where = datasets.readers.data_root(root)
        for name, state in status.items():
            print(f"{name}: {'downloaded and verified' if state == 'downloaded' else 'already present, verified'}"
                  f" in {where / name}")
        return
    root = datasets.readers.data_root(args.data_root)
    print(f"data root: {root}{'' if root.is_dir() else ' (does not exist yet)'}")
    print(f"{'name':<42} {'n':>7} {'d':>4}  here")
    for name, n, d, here in datasets.catalogue(args.data_root):
        print(f"{name:<42} {'any' if n < 0 else n:>7} {d:>4}  {'yes' if here else 'no'}")
    print("fetch missing sets with `neuralgp datasets download NAME... | --all`")


def _without_nproc(argv: list[str]) -> list[str]:
    """The command line minus ``--nproc N`` / ``--nproc=N``: what each launched worker runs."""
    out, skip = [], False
    for item in argv:
        if skip:
            skip = False
        elif item == "--nproc":
            skip = True
        elif not item.startswith("--nproc="):
            out.append(item)
    return out


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    if args.command == "fit" and args.nproc > 1 and "WORLD_SIZE" not in os.environ:
        from neuralgp.distributed import launch
        return launch(_without_nproc(argv), args.nproc)
    handler = {"demo": _cmd_demo, "fit": _cmd_fit, "predict": _cmd_predict, "bench": _cmd_bench,
               "datasets": _cmd_datasets}[args.command]
    try:
        with warnings.catch_warnings():  # a warning is one line naming the command, not a file, line and source
            warnings.showwarning = lambda message, category, *_, **__: print(
                f"neuralgp {args.command}: {category.__name__}: {message}", file=sys.stderr)
            handler(args)
    except NeuralGPError as exc:
        from neuralgp.distributed import report_worker_error
        message = f"neuralgp {args.command}: error: {exc}"
        if not report_worker_error(message):
            print(message, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())

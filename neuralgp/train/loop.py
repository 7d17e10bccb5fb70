"""The one training loop: steps, periodic validation, early stopping with best-state restore, progress."""

from __future__ import annotations

import math
import sys
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm

from neuralgp import distributed
from neuralgp.errors import CheckpointError
from neuralgp.io import write_atomic


@dataclass
class TrainLog:
    steps: int = 0  # iterations (full batch) or epochs (mini-batch) actually run
    best_step: int = 0
    best_val_nll: float = math.nan
    seconds: float = 0.0
    stopped_early: bool = False
    out_of_time: bool = False
    failure: str = ""  # the numerical error that stopped training, if one did
    history: list = field(default_factory=list)  # (step, train loss, val nll)
    validation_points: list = field(default_factory=list)  # what each check's ``validate()`` gave besides the NLL

    def as_dict(self) -> dict:
        return {"steps": self.steps, "best_step": self.best_step, "best_val_nll": self.best_val_nll,
                "seconds": self.seconds, "stopped_early": self.stopped_early, "out_of_time": self.out_of_time}


def compiled(batch_loss, optimizer, enabled: bool = True):
    """For one fit with ``enabled`` (an estimator's ``compile=True``): ``batch_loss`` and ``optimizer.step``
    through ``torch.compile`` (TorchInductor; a C++ compiler on a CPU), else ``batch_loss`` as it is. Shapes are
    static: the full batches and the last, smaller one compile once each (dynamic shapes measured 1.7× slower
    for DAK-CF). torch.compile's caches are cleared first (``torch.compiler.reset``): each fit compiles afresh
    (from PyTorch's on-disk cache when it has seen the shapes), so repeated fits in one process never reach
    PyTorch's recompile limit, past which it would silently run eagerly. A failed build is an error naming the
    way out, raised at the first batch."""
    if not enabled:
        return batch_loss
    torch.compiler.reset()
    loss = torch.compile(batch_loss, dynamic=False)
    optimizer.step = torch.compile(optimizer.step, dynamic=False)

    def call(idx):
        try:
            return loss(idx)
        except torch._dynamo.exc.BackendCompilerFailed as error:
            raise RuntimeError(f"compile=True: torch.compile could not build the training step ({error}); "
                               "install a C++ compiler or fit with compile=False") from error
    return call


def steps_per_epoch(n: int, batch_size: int, min_batch: int = 1) -> int:
    """The optimiser steps ``minibatch_epoch`` takes on n rows in one process: its full batches, and the last one
    unless it is smaller than ``min_batch``."""
    size = min(batch_size, n)
    return n // size + (n % size >= max(min_batch, 1))


def minibatch_epoch(batch_loss, n: int, batch_size: int, generator: torch.Generator, optimizer,
                    min_batch: int = 1, n_batches: int | None = None, after_backward=None) -> float:
    """One optimiser step per batch of a random permutation of range(n); returns the mean loss.

    ``batch_loss(idx)`` returns the loss tensor of a batch (NaN when it breaks down, which ends the epoch
    with NaN); batches smaller than ``min_batch`` are skipped (they join the next permutation).
    Data-parallel workers give ``n_batches`` (the same on every worker: full batches drawn from as many
    permutations as needed) and ``after_backward`` (the gradient all-reduce); a NaN on one worker ends the
    epoch on all of them.
    """
    size = min(batch_size, n)
    if n_batches is None:
        batches = torch.randperm(n, generator=generator).split(size)
    else:
        order = torch.cat([torch.randperm(n, generator=generator) for _ in range(-(-n_batches * size // n))])
        batches = order[:n_batches * size].split(size)
    total = 0.0
    for idx in batches:
        if len(idx) < min_batch:
            continue
        optimizer.zero_grad(set_to_none=True)
        loss = batch_loss(idx)
        broken = not torch.isfinite(loss)
        if distributed.any_worker(broken) if n_batches is not None else broken:
            return math.nan
        loss.backward()
        if after_backward is not None:
            after_backward()
        optimizer.step()
        total += loss.item() * len(idx) / (n if n_batches is None else n_batches * size)
    return total


@dataclass
class Checkpoint:
    """``train`` saves its whole state to ``path`` every ``every`` steps — the module, the best state so far, the
    optimiser, torch's RNG and the ``generators`` (mini-batch order), the step and the elapsed time — atomically,
    and resumes from it when it exists: a killed fit resumed from its checkpoint ends where an uninterrupted fit
    ends. ``fingerprint`` identifies the fit (parameters and data): a checkpoint of another fit is refused. In a
    process group each worker keeps its own file (``path.rank<r>``: mini-batch orders differ by worker)."""

    path: Path
    every: int
    optimizer: torch.optim.Optimizer
    fingerprint: str
    generators: tuple = ()

    @property
    def file(self) -> Path:
        rank, size = distributed.world()
        return Path(self.path) if size == 1 else Path(f"{self.path}.rank{rank}")

    def save(self, module, best: dict, log: "TrainLog", step: int, elapsed: float):
        state = {"fingerprint": self.fingerprint, "step": step, "elapsed": elapsed, "module": module.state_dict(),
                 "best": best, "optimizer": self.optimizer.state_dict(), "torch_rng": torch.get_rng_state(),
                 "generators": [g.get_state() for g in self.generators],
                 "log": {"best_step": log.best_step, "best_val_nll": log.best_val_nll,
                         "history": [list(h) for h in log.history], "validation_points": log.validation_points}}
        write_atomic(self.file, lambda tmp: torch.save(state, tmp))

    def restore(self, module, log: "TrainLog"):
        """(step, elapsed seconds, best state) from the checkpoint file, with the module, optimiser, RNGs and
        ``log`` restored; None when there is no file."""
        if not self.file.exists():
            return None
        try:
            state = torch.load(self.file, weights_only=True)
        except Exception as exc:  # a file of something else
            raise CheckpointError(f"cannot read checkpoint {self.file} ({exc}); delete it to start afresh") from None
        if not isinstance(state, dict) or state.get("fingerprint") != self.fingerprint:
            raise CheckpointError(f"checkpoint {self.file} belongs to another fit (other parameters or data); delete "
                                  "it or give another checkpoint path")
        module.load_state_dict(state["module"])
        self.optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        for g, g_state in zip(self.generators, state["generators"]):
            g.set_state(g_state)
        log.best_step, log.best_val_nll = state["log"]["best_step"], state["log"]["best_val_nll"]
        log.history = [tuple(h) for h in state["log"]["history"]]
        log.validation_points = state["log"].get("validation_points", [])
        return state["step"], state["elapsed"], state["best"]

    def remove(self):
        self.file.unlink(missing_ok=True)


def _snapshot(module: torch.nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _check(validate, log: TrainLog) -> float:
    """One validation check: its NLL, its points (if it gives any) appended to ``log.validation_points``."""
    out = validate()
    if isinstance(out, tuple):
        out, points = out
        log.validation_points.append(points)
    return float(out)


@contextmanager
def denormals_flushed():
    """Subnormal floats read and written as zero on the CPU (``torch.set_flush_denormal``) inside, the previous mode
    restored after. Weight decay drives the weights of dead ReLU units (and their Adam moments) into the subnormal
    range, where x86 arithmetic is many times slower: on uci/kin40k (fold 0, DAK-CF defaults, 1 thread) epochs
    went from 0.33 s to 0.55–0.70 s after 30 of them without it, and stay at 0.33–0.37 s with it. Values below
    1.2e-38 (float32) become 0: dak-table2's metrics did not move. Where the CPU cannot flush this is a no-op."""
    previous = torch.tensor(1e-40, dtype=torch.float32).item() == 0.0  # a subnormal reads as 0 when flushing
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(previous)


def train(module: torch.nn.Module, step, n_steps: int, validate=None, eval_every: int = 100,
          patience: int = 2000, verbose: bool = True, desc: str = "fit", unit: str = "it",
          max_seconds: float | None = None, checkpoint: Checkpoint | None = None) -> TrainLog:
    """Run ``step()`` (returns the training loss) ``n_steps`` times.

    ``validate()`` returns a validation NLL — or (NLL, points), whose points are kept in ``log.validation_points``
    in the order of the checks — before the first step and every ``eval_every`` steps; training
    stops when it has not improved for ``patience`` steps, and the best state (possibly the initial one)
    is restored. Without ``validate`` the
    final state is kept. A non-finite loss, or a numerical failure in a later step (a ``FloatingPointError``
    such as a failed Cholesky), stops training with a warning and restores the last checked state; at the first
    step it is raised.
    After ``max_seconds`` of wall-clock time training checks once more and stops (``out_of_time``).
    With a ``checkpoint`` the state is saved every ``checkpoint.every`` steps, training resumes from the file
    when it exists (the time budget counts the time before the interruption too), and the file is removed when
    training ends.
    """
    log = TrainLog()
    best = _snapshot(module)
    first, start = 1, time.perf_counter()
    resumed = None if checkpoint is None else checkpoint.restore(module, log)
    if resumed is not None:
        done, elapsed, best = resumed
        first, start = done + 1, start - elapsed
    progress = tqdm(total=n_steps, initial=first - 1, desc=desc, unit=unit, leave=False, dynamic_ncols=True,
                    disable=not verbose or not distributed.is_main(),
                    mininterval=0.1 if sys.stderr.isatty() else 10.0)  # logs (CI, make demo) get a line per 10 s
    with progress as bar, denormals_flushed():
        if validate is not None and resumed is None:
            val = _check(validate, log)
            log.history.append((0, math.nan, val))
            if math.isfinite(val):
                log.best_val_nll = val
        for i in range(first, n_steps + 1):
            try:
                loss = float(step())
            except (FloatingPointError, torch.linalg.LinAlgError) as exc:  # e.g. a Cholesky that failed
                if i == 1:  # as for a non-finite loss below: at the first step there is no state to fall back on
                    raise
                loss, log.failure = math.nan, f"{type(exc).__name__}: {exc}"
            log.steps = i
            bar.update(1)
            # decisions that end the loop are taken together by all workers of a process group
            broken, out_of_time = distributed.agree(
                not math.isfinite(loss), max_seconds is not None and time.perf_counter() - start > max_seconds)
            if broken:
                if i == 1:
                    raise FloatingPointError("the training loss is not finite at the first step; "
                                             "check the data scale or lower the learning rate")
                log.stopped_early = True
                warnings.warn(f"training stopped at step {i}: {log.failure or 'the loss is not finite'}; the "
                              f"state of step {log.best_step} is kept", RuntimeWarning, stacklevel=2)
                break
            check = i % eval_every == 0 or i == n_steps or out_of_time
            if validate is not None and check:
                val = _check(validate, log)
                log.history.append((i, loss, val))
                if math.isfinite(val) and not val >= log.best_val_nll:  # also true while best is nan
                    log.best_val_nll, log.best_step, best = val, i, _snapshot(module)
                bar.set_postfix(loss=f"{loss:.4g}", val_nll=f"{val:.4g}", best=f"{log.best_val_nll:.4g}",
                                refresh=False)  # shown at the next refresh: a log gets a line per 10 s
                if i - log.best_step >= patience:
                    log.stopped_early = True
                    break
            elif validate is None and check:
                best, log.best_step = _snapshot(module), i
                log.history.append((i, loss, math.nan))
                bar.set_postfix(loss=f"{loss:.4g}", refresh=False)
            if checkpoint is not None and i % checkpoint.every == 0 and i < n_steps:
                checkpoint.save(module, best, log, i, time.perf_counter() - start)
            if out_of_time:
                log.out_of_time = True
                break
    if checkpoint is not None:  # the trained module is the product: a finished training leaves no checkpoint
        checkpoint.remove()
    module.load_state_dict(best)
    log.seconds = time.perf_counter() - start
    return log

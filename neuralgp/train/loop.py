"""The one training loop: steps, periodic validation, early stopping with best-state restore, progress."""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field

import torch
from tqdm.auto import tqdm

from neuralgp import distributed


@dataclass
class TrainLog:
    steps: int = 0  # iterations (full batch) or epochs (mini-batch) actually run
    best_step: int = 0
    best_val_nll: float = math.nan
    seconds: float = 0.0
    stopped_early: bool = False
    out_of_time: bool = False
    history: list = field(default_factory=list)  # (step, train loss, val nll)

    def as_dict(self) -> dict:
        return {"steps": self.steps, "best_step": self.best_step, "best_val_nll": self.best_val_nll,
                "seconds": self.seconds, "stopped_early": self.stopped_early, "out_of_time": self.out_of_time}


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


def _snapshot(module: torch.nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def train(module: torch.nn.Module, step, n_steps: int, validate=None, eval_every: int = 100,
          patience: int = 2000, verbose: bool = True, desc: str = "fit", unit: str = "it",
          max_seconds: float | None = None) -> TrainLog:
    """Run ``step()`` (returns the training loss) ``n_steps`` times.

    ``validate()`` returns a validation NLL, before the first step and every ``eval_every`` steps; training
    stops when it has not improved for ``patience`` steps, and the best state (possibly the initial one)
    is restored. Without ``validate`` the
    final state is kept. A non-finite loss stops training and restores the last checked state.
    After ``max_seconds`` of wall-clock time training checks once more and stops (``out_of_time``).
    """
    log = TrainLog()
    best = _snapshot(module)
    start = time.perf_counter()
    bar = tqdm(total=n_steps, desc=desc, unit=unit, disable=not verbose or not distributed.is_main(), leave=False,
               dynamic_ncols=True,
               mininterval=0.1 if sys.stderr.isatty() else 10.0)  # logs (CI, make demo) get a line per 10 s
    try:
        if validate is not None:
            val = float(validate())
            log.history.append((0, math.nan, val))
            if math.isfinite(val):
                log.best_val_nll = val
        for i in range(1, n_steps + 1):
            loss = float(step())
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
                break
            check = i % eval_every == 0 or i == n_steps or out_of_time
            if validate is not None and check:
                val = float(validate())
                log.history.append((i, loss, val))
                if math.isfinite(val) and not val >= log.best_val_nll:  # also true while best is nan
                    log.best_val_nll, log.best_step, best = val, i, _snapshot(module)
                bar.set_postfix(loss=f"{loss:.4g}", val_nll=f"{val:.4g}", best=f"{log.best_val_nll:.4g}")
                if i - log.best_step >= patience:
                    log.stopped_early = True
                    break
            elif validate is None and check:
                best, log.best_step = _snapshot(module), i
                log.history.append((i, loss, math.nan))
                bar.set_postfix(loss=f"{loss:.4g}")
            if out_of_time:
                log.out_of_time = True
                break
    finally:
        bar.close()
    module.load_state_dict(best)
    log.seconds = time.perf_counter() - start
    return log

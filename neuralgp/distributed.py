"""Training across processes on torch.distributed (gloo on CPU, NCCL on GPU) — no communication layer of our own.

Every worker holds its own shard of the rows. Exact inference needs only sums of the engine's r×r statistics
(ΦᵀΦ, Φᵀy, yᵀy) and of the network's gradients; mini-batch inference averages gradients (data parallel).
Outside an initialised process group of more than one worker every helper here is the identity, so the
single-process code path is unchanged.

Launch: ``neuralgp fit … --nproc N`` (``launch``) or ``torchrun … -m neuralgp fit …``; the Python API takes a process
group the caller initialised (``torch.distributed.init_process_group``).
"""

from __future__ import annotations

import contextlib
import datetime
import faulthandler
import math
import os
import socket
import sys
import uuid
from pathlib import Path

import torch
import torch.distributed as dist

DEFAULT_TIMEOUT_S = 300  # a collective that waits longer (a worker died) raises instead of hanging


def world() -> tuple[int, int]:
    """(rank, world size); (0, 1) outside a process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_distributed() -> bool:
    return world()[1] > 1


def is_main() -> bool:
    """Whether this worker prints, writes results and saves models (rank 0)."""
    return world()[0] == 0


def _reduced(tensor: torch.Tensor, op) -> torch.Tensor:
    out = tensor.detach().clone()
    if is_distributed():
        dist.all_reduce(out, op=op)
    return out


def total(tensor: torch.Tensor) -> torch.Tensor:
    """Sum over workers, differentiable into this worker's share: local + (Σ_workers local − local) held
    constant, so that back-propagating a function of the total gives this worker's part of the full gradient."""
    if not is_distributed():
        return tensor
    return tensor + (_reduced(tensor, dist.ReduceOp.SUM) - tensor.detach())


def maximum(tensor: torch.Tensor) -> torch.Tensor:
    """Element-wise max over workers (no gradient)."""
    return _reduced(tensor, dist.ReduceOp.MAX) if is_distributed() else tensor


def maximum_and_holder(local_max: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """(max over workers of a scalar, whether this worker is the lowest-ranked one holding it): a max's
    subgradient must reach one point, not one per worker."""
    if not is_distributed():
        return local_max, True
    top = maximum(local_max)
    rank, size = world()
    candidate = torch.tensor(rank if bool(local_max.detach() == top) else size, dtype=torch.int64)
    return top, int(_reduced(candidate, dist.ReduceOp.MIN)) == rank


def from_main(tensor: torch.Tensor) -> torch.Tensor:
    """Rank 0's tensor on every worker (shape included): initial values that must agree, e.g. inducing points
    drawn from each worker's own rows."""
    if not is_distributed():
        return tensor
    shape = torch.tensor(tensor.shape if is_main() else [0] * tensor.dim(), dtype=torch.int64)
    dist.broadcast(shape, src=0)
    out = tensor.contiguous() if is_main() else tensor.new_empty(tuple(shape.tolist()))
    dist.broadcast(out, src=0)
    return out


def total_count(n: int) -> int:
    return int(_reduced(torch.tensor(n, dtype=torch.int64), dist.ReduceOp.SUM)) if is_distributed() else n


def agree(*flags: bool) -> list[bool]:
    """Each flag true when it is true on any worker (one all-reduce): decisions that end a loop must be the
    same everywhere, or the others wait for a worker that has left."""
    if not is_distributed():
        return [bool(f) for f in flags]
    return [bool(v > 0) for v in _reduced(torch.tensor([float(f) for f in flags]), dist.ReduceOp.MAX)]


def any_worker(flag: bool) -> bool:
    return agree(flag)[0]


def reduce_stats(stats):
    """The engine's ``GramStats`` summed over workers (every worker gets the same totals)."""
    if not is_distributed():
        return stats
    from neuralgp.posterior.exact import GramStats
    return GramStats(total(stats.A), total(stats.b), total(stats.c), total_count(stats.n), total(stats.logdet_d))


def sum_gradients(parameters, average: bool = False):
    """All-reduce the gradients of ``parameters`` in one flat buffer (a missing gradient counts as zero)."""
    if not is_distributed():
        return
    params = [p for p in parameters if p.requires_grad]
    if not params:
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    if average:
        flat /= world()[1]
    offset = 0
    for p in params:
        p.grad.copy_(flat[offset:offset + p.numel()].view_as(p.grad))
        offset += p.numel()


def sum_gradients_float64(parameters, sums):
    """Set each parameter's gradient to its float64 sum in ``sums`` added over workers (one all-reduce), cast to
    the parameter's dtype."""
    if is_distributed() and sums:
        flat = torch.cat([s.reshape(-1) for s in sums])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        sums = list(flat.split([s.numel() for s in sums]))
    for p, s in zip(parameters, sums):
        p.grad = s.reshape(p.shape).to(p.dtype)


def data_parallel(n_local: int, batch_size: int, parameters) -> dict:
    """``minibatch_epoch``'s arguments for data-parallel training: as many full batches on every worker (the largest
    worker's count) and the gradients averaged after each backward — two workers with batch B take the step one
    process takes with batch 2B; {} outside a process group."""
    if not is_distributed():
        return {}
    params = list(parameters)
    local = torch.tensor(math.ceil(n_local / min(batch_size, n_local)))
    return dict(n_batches=int(maximum(local)), after_backward=lambda: sum_gradients(params, average=True))


def shard(n: int, block: int = 1) -> slice:
    """This worker's contiguous part of range(n): whole blocks of ``block`` rows (the last one may be shorter),
    the workers' block counts differing by at most one; unaligned (sizes differing by at most one) when there are
    fewer blocks than workers."""
    rank, size = world()
    blocks = -(-n // block)
    if blocks < size:
        block, blocks = 1, n
    return slice(min(n, rank * blocks // size * block), min(n, (rank + 1) * blocks // size * block))


def free_local_port() -> int:
    """A free TCP port on 127.0.0.1 for a single-machine rendezvous (tests, ``bench scaleout``)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_from_environment(device: str = "cpu", timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """Join the process group that ``torchrun`` describes in the environment (RANK, WORLD_SIZE, MASTER_ADDR, …):
    gloo for CPU, NCCL for CUDA. Returns False (and does nothing) when not started by a launcher."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return dist.is_initialized()
    faulthandler.enable()  # a worker that aborts in C++ (gloo, NCCL) shows where it was in Python
    backend = "nccl" if str(device).startswith("cuda") else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
    # every worker past gloo's mesh before any leaves: a worker that met bad input and left while a slower one was
    # still connecting made that one print gloo's "connectFullMesh failed" (CI under load, 2026-12-07)
    dist.barrier()
    return True


def close(finished: bool = True):
    """Leave the process group (at the end of a launched worker). A worker that ``finished`` first waits at a barrier
    for the others: one that tears down its connections while another is still working can make gloo abort that
    other process ("terminate called without an active exception"). A worker leaving on an error skips the wait."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    if finished:
        try:
            dist.barrier()
        except RuntimeError:  # a peer has gone: nothing left to wait for
            pass
    dist.destroy_process_group()


@contextlib.contextmanager
def closing_group():
    """``with closing_group(): work()`` leaves the process group after the work: at a barrier when the work finished,
    at once when it raised."""
    try:
        yield
    except BaseException:
        close(finished=False)
        raise
    close()


def exit_worker(code: int = 0):
    """End a launched worker once it has left the process group, skipping the interpreter's teardown, where torch's
    C++ destructors (gloo's threads) run. A worker aborted once in CI with "terminate called without an active
    exception" and the launcher failed the run (2026-11-27; not reproduced in 51 runs here, so where it aborted is not
    known: ``init_from_environment`` now turns on faulthandler, which prints the Python stack of such an abort)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def launch(argv: list[str], nproc: int) -> int:
    """Run ``python -m neuralgp ARGV`` in ``nproc`` local workers through torch's own launcher (what
    ``torchrun --standalone --nproc-per-node N`` does; its API, so that our options never meet its parser).
    Returns 0; 2 when a worker stopped on a ``NeuralGPError`` (bad input, a model that does not train across
    processes: each distinct message printed once, as one process prints it, without the launcher's report); 1 when
    a worker failed otherwise (the launcher has stopped the others; its report is printed)."""
    import logging
    import shutil
    import tempfile

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=str(uuid.uuid4()),
                          rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0)
    errors = Path(tempfile.mkdtemp(prefix="neuralgp-workers-"))
    os.environ[WORKER_ERRORS] = str(errors)
    agent_log = logging.getLogger("torch.distributed.elastic")
    level = agent_log.level
    agent_log.setLevel(logging.CRITICAL)  # its warnings on stopping the other workers; the report below says more
    try:
        elastic_launch(config, entrypoint=sys.executable)("-m", "neuralgp", *argv)
    except ChildFailedError as exc:
        messages = dict.fromkeys(f.read_text() for f in sorted(errors.iterdir()))
        print("\n".join(messages) if messages else exc.format_msg(), file=sys.stderr)
        return 2 if messages else 1
    finally:
        agent_log.setLevel(level)
        os.environ.pop(WORKER_ERRORS, None)
        shutil.rmtree(errors, ignore_errors=True)
    return 0


# the folder where a worker that ``launch`` started leaves its error message (``report_worker_error``)
WORKER_ERRORS = "NEURALGP_WORKER_ERRORS"


def report_worker_error(message: str) -> bool:
    """In a worker that ``launch`` started: leave ``message`` for the launcher to print once, and return True;
    elsewhere (one process, or workers torchrun started) return False: the caller prints it."""
    folder = os.environ.get(WORKER_ERRORS)
    if not folder or "RANK" not in os.environ or not os.path.isdir(folder):
        return False
    Path(folder, os.environ["RANK"]).write_text(message)
    return True

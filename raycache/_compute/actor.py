"""The start-up guard of a model actor or task: a whole torch in its process, its pool's torch
threads, and a GPU torch must see."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from raycache._errors import EncoderError

if TYPE_CHECKING:
    from raycache._compute.pool import Pool

__all__ = ["cut_short", "set_threads", "start_actor", "whole_torch"]

WORKER_LEFT = 75
"""The exit status of a Ray worker that leaves because torch was cut short in it (EX_TEMPFAIL)."""


def start_actor(pool: Pool, what: str) -> None:
    """Set torch's threads to the pool's (at most this machine's CPUs); an EncoderError when Ray
    gave the `what` actor a GPU that torch cannot see (a CPU build of torch)."""
    import torch

    set_threads(pool)
    if pool.device == "cuda" and not torch.cuda.is_available():
        raise EncoderError(
            f"{what} actor was given {pool.gpus:g} GPU by Ray, but torch "
            f"{torch.__version__} sees no CUDA device; install a CUDA build of torch on the "
            "GPU nodes, or set num_gpus: 0"
        )


def set_threads(pool: Pool) -> None:
    """Torch's threads set to the pool's, at most this machine's CPUs."""
    import torch

    want = max(1, min(pool.threads, os.cpu_count() or 1))
    if torch.get_num_threads() != want:
        torch.set_num_threads(want)


def cut_short() -> bool:
    """Whether an import of torch in this process was cut short: some of its submodules loaded,
    torch itself not (a task cancelled by Ray while it imported torch, outside a memo's build).
    Python cannot import torch again in such a process: it raises, or crashes."""
    return "torch" not in sys.modules and any(name.startswith("torch.") for name in sys.modules)


def whole_torch(what: str) -> None:
    """Before a model stage is built (whatever it imports first): where torch was cut short in
    this process, end it if it is a Ray worker, so that Ray runs the task again in a fresh one;
    in the calling process, an EncoderError."""
    if not cut_short():
        return
    import ray

    if ray.is_initialized() and ray.get_runtime_context().worker.mode == ray.WORKER_MODE:
        print(f"raycache: an import of torch in this Ray worker (pid {os.getpid()}) was cut "
              f"short earlier, so it cannot start the {what}; the worker leaves and Ray "
              "runs its task again in a fresh one", file=sys.stderr, flush=True)
        os._exit(WORKER_LEFT)
    raise EncoderError(
        f"an import of torch in this process (pid {os.getpid()}) was cut short earlier, so it "
        f"cannot start the {what}; run it again in a fresh Python process")

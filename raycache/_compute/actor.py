"""The start-up guard of a model actor or task: its pool's torch threads, and a GPU torch must
see."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from raycache._errors import EncoderError

if TYPE_CHECKING:
    from raycache._compute.pool import Pool

__all__ = ["set_threads", "start_actor"]


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

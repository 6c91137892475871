"""Intra-op threads sized to the work: a small computation runs on one thread.

A solve or search of small matrices is hundreds of small kernels, and each waits for every
intra-op thread; on a busy machine that is 5-25x slower than one thread alone (bench/README.md,
probe.py). Large matrix products keep every thread."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["ONE_THREAD_FLOPS", "sized"]

ONE_THREAD_FLOPS = 2**28
"""Below this many flops per step, one thread."""


@contextlib.contextmanager
def sized(flops: float, device: str = "cpu") -> Iterator[None]:
    """Run the block on one CPU thread where a step costs under ONE_THREAD_FLOPS."""
    import torch

    threads = torch.get_num_threads()
    small = device == "cpu" and flops < ONE_THREAD_FLOPS
    if small:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if small:
            torch.set_num_threads(threads)

"""Timestamps and sums that code inside a model call marks on its block (for the benches' block
timelines; a no-op outside a marked call)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["add", "mark", "marking"]

_here = threading.local()  # a Ray Data actor runs each concurrent call in its own thread


@contextmanager
def marking(marks: dict[str, float]) -> Iterator[dict[str, float]]:
    """Code run inside this block (in this thread) marks `marks`."""
    before = getattr(_here, "marks", None)
    _here.marks = marks
    try:
        yield marks
    finally:
        _here.marks = before


def mark(name: str) -> None:
    """The time (time.time) of `name` in the current call's marks (e.g. "launched": the last
    kernel of a block queued on the device); nothing outside a marked call."""
    marks = getattr(_here, "marks", None)
    if marks is not None:
        marks[name] = time.time()


def add(name: str, amount: float) -> None:
    """`amount` added to `name` in the current call's marks (e.g. a stand-in's "gpu_s")."""
    marks = getattr(_here, "marks", None)
    if marks is not None:
        marks[name] = marks.get(name, 0.0) + amount

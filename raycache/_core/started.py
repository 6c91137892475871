"""Bench-only start-up marks of a job's processes: with RAYCACHE_START_MARKS naming a folder (set
before Ray starts), each process appends one JSON line a mark to `start-<pid>.jsonl`: the mark's
name, its time (time.time) and the process's CPU seconds so far. A no-op otherwise."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["START_MARKS", "mark", "once", "span"]

START_MARKS = "RAYCACHE_START_MARKS"
"""The environment variable naming the folder of start-up marks (bench/startup.py sets it)."""


def mark(name: str) -> None:
    """`name` marked now in this process's start-up marks, where the folder is set."""
    folder = os.environ.get(START_MARKS)
    if not folder:
        return
    line = {"pid": os.getpid(), "mark": name, "t": time.time(), "cpu": time.process_time()}
    with open(os.path.join(folder, f"start-{os.getpid()}.jsonl"), "a") as f:
        f.write(json.dumps(line) + "\n")


@contextmanager
def span(name: str) -> Iterator[None]:
    """`name:start` and `name:end` marked around the block."""
    mark(f"{name}:start")
    try:
        yield
    finally:
        mark(f"{name}:end")


_DONE: set[str] = set()


def once(name: str) -> None:
    """`name` marked the first time this process reaches it."""
    if name not in _DONE and os.environ.get(START_MARKS):
        _DONE.add(name)
        mark(name)

"""What a Ray worker process builds once and memoises for the tasks it runs next: a job's stages,
the models they load. Bounded: the most recently used few of each kind."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

__all__ = ["MEMO_SIZE", "memo"]

MEMO_SIZE = 2
"""Entries of each kind a process keeps (a fill's stages and the one before; an encoder's
models and one other's): what a task finds built when the same job or encoder comes again."""

_MEMO: dict[str, OrderedDict[Hashable, Any]] = {}
_LOCK = threading.Lock()  # a process may run several tasks on threads (Ray's threaded actors)


def memo(kind: str, key: Hashable, build: Callable[[], Any]) -> Any:
    """The `kind` entry of `key` this process built before, else `build()` memoised under it (the
    least recently used one of that kind dropped past MEMO_SIZE). A build that raises keeps
    nothing, so the next task tries again and raises the same."""
    with _LOCK:
        entries = _MEMO.setdefault(kind, OrderedDict())
        if key in entries:
            entries.move_to_end(key)
            return entries[key]
    value = build()  # outside the lock: a model load takes seconds
    with _LOCK:
        entries[key] = value
        while len(entries) > MEMO_SIZE:
            entries.popitem(last=False)
    return value

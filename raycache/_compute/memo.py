"""What a Ray worker process builds once and memoises for the tasks it runs next: a job's stages,
the models they load. Bounded: the most recently used few of each kind.

A task's build (`apart`) runs on a thread of its own. Ray cancels a task by raising
KeyboardInterrupt in the worker's main thread, at whatever line it is on; an import of an
extension module (torch, tokenizers) cut short there leaves a process that cannot import it
again, or crashes when it tries. Off the main thread the build goes on: the cancelled task stops
waiting for it, and the next task in the process waits for the same build. (An actor's
constructor is never cut short: Ray cancels no actor call that has started.)"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Any

__all__ = ["MEMO_SIZE", "memo"]

MEMO_SIZE = 2
"""Entries of each kind a process keeps (a fill's stages and the one before; an encoder's
models and one other's): what a task finds built when the same job or encoder comes again."""

_MEMO: dict[str, OrderedDict[Hashable, Future]] = {}
_LOCK = threading.Lock()  # a process may run several tasks on threads (Ray's threaded actors)


def memo(kind: str, key: Hashable, build: Callable[[], Any], apart: bool = False) -> Any:
    """The `kind` entry of `key` this process built (or is building), else `build()` memoised
    under it (the least recently used one of that kind dropped past MEMO_SIZE); with `apart`,
    built out of a cancel's reach. A build that raises keeps nothing, so the next task tries
    again and raises the same."""
    with _LOCK:
        entries = _MEMO.setdefault(kind, OrderedDict())
        built = entries.get(key)
        fresh = built is None
        if fresh:
            built = entries[key] = Future()
            while len(entries) > MEMO_SIZE:
                entries.popitem(last=False)
        else:
            entries.move_to_end(key)
    if fresh:  # outside the lock: a model load takes seconds, and may memoise its own parts
        _start(built, build, apart)
    try:
        return built.result()
    except Exception:
        with _LOCK:
            if entries.get(key) is built:
                del entries[key]
        raise


def _start(built: Future, build: Callable[[], Any], apart: bool) -> None:
    """`build()` into `built`: with `apart` and on the main thread (where a cancel lands), on a
    thread of its own; else in this thread."""

    def run() -> None:
        try:
            built.set_result(build())
        except BaseException as e:  # handed to every caller waiting on it
            built.set_exception(e)

    if apart and threading.current_thread() is threading.main_thread():
        threading.Thread(target=run, name="raycache-build", daemon=True).start()
    else:
        run()

"""What a Ray worker process builds once and memoises for the tasks it runs next: a job's stages,
the models they load. Bounded: the most recently used few of each kind.

A build runs on a thread of its own when it is called on the main thread. Ray cancels a task by
raising KeyboardInterrupt in the worker's main thread, at whatever line it is on; an import of
an extension module (torch, tokenizers) cut short there leaves a process that cannot import it
again, or crashes when it tries. Off the main thread the build goes on: the cancelled task stops
waiting for it, and the next task in the process waits for the same build."""

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


def memo(kind: str, key: Hashable, build: Callable[[], Any]) -> Any:
    """The `kind` entry of `key` this process built (or is building), else `build()` memoised
    under it (the least recently used one of that kind dropped past MEMO_SIZE). A build that
    raises keeps nothing, so the next task tries again and raises the same."""
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
        _start(built, build)
    try:
        return built.result()
    except Exception:
        with _LOCK:
            if entries.get(key) is built:
                del entries[key]
        raise


def _start(built: Future, build: Callable[[], Any]) -> None:
    """`build()` into `built`: on a thread of its own from the main thread (out of a cancel's
    reach), in this thread from any other."""

    def run() -> None:
        try:
            built.set_result(build())
        except BaseException as e:  # handed to every caller waiting on it
            built.set_exception(e)

    if threading.current_thread() is threading.main_thread():
        threading.Thread(target=run, name="raycache-build", daemon=True).start()
    else:
        run()

"""A fill's lease on its cache folder: a small record, refreshed while the fill runs, that gc
honours whatever its grace, so it never removes what a live fill is writing."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterable
from types import TracebackType

from raycache._cache.store import Store
from raycache._errors import StoreUnavailable

__all__ = ["LEASES", "PERIOD_S", "STALE_S", "Lease", "live"]

LEASES = "_leases"
"""The folder of a cache folder that holds the leases of the fills writing it, one file each."""
PERIOD_S = 30.0
"""How often a held lease is written again."""
STALE_S = 10 * PERIOD_S
"""A lease not written for this long protects nothing: its fill died (kill -9, a lost host)."""


def live(leases: Iterable[tuple[str, float]], now: float) -> list[str]:
    """The names of the leases (name, last written, in seconds since the epoch) written within
    STALE_S of `now`."""
    return [name for name, when in leases if now - when <= STALE_S]


class Lease:
    """Held from a fill's start to its end (`with Lease(store, cache_dir) as lease:`): written
    at once, then every `period_s` from a daemon thread, removed at the end. A lease that
    disappears while held (its folder was removed) is `lost`, and never written again."""

    def __init__(self, store: Store, cache_dir: str, period_s: float = PERIOD_S):
        self.store, self.cache_dir, self.period_s = store, cache_dir, period_s
        self.name = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}.json"
        self.path = f"{cache_dir}/{LEASES}/{self.name}"
        self._stop = threading.Event()
        self._lost = False
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Lease:
        self._write()
        self._thread = threading.Thread(target=self._beat, name="raycache-lease", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if isinstance(exc, StoreUnavailable):  # the store itself failed: removing would wait
            return  # on it as long again; the lease goes stale instead (STALE_S)
        if self._thread is not None:
            self._thread.join(timeout=self.store.timeout_s)
        with contextlib.suppress(Exception):  # gone already, or the store failed: it goes stale
            self.store.rm(self.path)
        if self.store.is_local:  # an empty folder left behind is harmless, but untidy
            with contextlib.suppress(OSError):
                os.rmdir(f"{self.cache_dir}/{LEASES}")

    @property
    def lost(self) -> bool:
        """Whether the lease was removed while held (with its folder, by gc or by hand)."""
        if not self._lost:
            with contextlib.suppress(Exception):  # a store that fails now: not known lost
                self._lost = not self.store.exists(self.path)
        return self._lost

    def _write(self) -> None:
        self.store.write_json(self.path, {"host": socket.gethostname(), "pid": os.getpid(),
                                          "written": time.time(), "period_s": self.period_s})

    def _refresh(self) -> None:
        """Written again; FileNotFoundError where it was removed, and then never made again
        (locally a touch, which cannot make a removed folder again)."""
        if self.store.is_local:
            os.utime(self.path)
        elif self.store.exists(self.path):
            self._write()
        else:
            raise FileNotFoundError(self.path)

    def _beat(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                self._refresh()
            except FileNotFoundError:
                self._lost = True
                return
            except Exception:  # a store that fails now: the next beat tries again
                continue

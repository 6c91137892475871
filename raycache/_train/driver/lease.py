"""A training run's lease on its run folder: held from the run's start to its end, so a second
train of the same run_name (another process, another host) is refused, naming the holder,
rather than training into the same folder; a lease its train stopped refreshing, or whose
driver on this host is gone (a killed driver's run resumes at once), is taken over."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from datetime import UTC, datetime

from raycache._cache.lease import LEASES, STALE_S, Lease, live
from raycache._cache.store import Store
from raycache._core.units import human_duration
from raycache._errors import RaycacheError
from raycache._train.folder.record import driver_alive

__all__ = ["run_lease"]


@contextlib.contextmanager
def run_lease(store: Store, run_dir: str, run_name: str) -> Iterator[Lease]:
    """Hold the run's lease (`<run_dir>/_leases/`) for the block: written, then every other
    lease there read; one refreshed within STALE_S is another train's, and this one is
    refused (a RaycacheError naming the run and that train's host and pid) before anything is
    written. Two trains that start at the very same moment may both be refused; never both
    let through. Stale leases, and those of a driver on this host that is gone (their train
    died), are removed."""
    with Lease(store, run_dir) as mine:
        now = time.time()
        folder = f"{run_dir}/{LEASES}"
        others = {path: when for path, (_, when) in store.files(folder).items()
                  if path.rsplit("/", 1)[-1] != mine.name}
        holders = {p: _holder(store, p) for p in live(list(others.items()), now)}
        held = [p for p, holder in holders.items() if holder is None or driver_alive(holder)]
        if held:
            raise RaycacheError(_held(run_name, store, held[0], holders[held[0]],
                                      others[held[0]], now))
        for path in others:  # their trains stopped refreshing them: taken over
            with contextlib.suppress(Exception):
                store.rm(path)
        yield mine


def _holder(store: Store, path: str) -> dict | None:
    """A lease's record (host, pid), or None where it cannot be read (then it still holds)."""
    try:
        record = store.read_json(path)
    except Exception:  # removed or half-written meanwhile
        return None
    return record if isinstance(record, dict) else None


def _held(run_name: str, store: Store, path: str, holder: dict | None, when: float,
          now: float) -> str:
    """The refusal: the run, who holds it (host, pid), when it last refreshed, and the fix."""
    who = (f"host {holder.get('host', '?')!r}, pid {holder.get('pid', '?')}" if holder
           else path.rsplit("/", 1)[-1])
    until = datetime.fromtimestamp(when + STALE_S, UTC).isoformat(timespec="seconds")
    return (f"run_name={run_name!r} is being trained by another train ({who}; its lease "
            f"{store.url(path)} was refreshed {human_duration(max(now - when, 0.0))} ago): two "
            "trains of one run would write one folder. Wait for it to end (the same config "
            "then returns its result), or choose another run_name; if that train died, its "
            f"lease expires {human_duration(STALE_S)} after its last refresh ({until}), and a "
            "train after that takes the run over")

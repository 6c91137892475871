"""What gc picks and what it must keep: the folders each policy picks (retain, older-than,
max-size), what protects a folder from them (a fill's lease, a run reading it, a run that can
resume, the newest of its name), and the names whose shard files stay wherever gc removes."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import datetime

from raycache._cache.lease import live
from raycache._cache.manifest import human_bytes
from raycache._cache.order import history
from raycache._cache.store import Store
from raycache._core.units import human_duration
from raycache._upkeep.du import Usage
from raycache._upkeep.removal import lease_only

__all__ = ["by_size", "leased", "oldest_first", "picked", "protected", "unknown"]


def oldest_first(usages: list[Usage]) -> list[Usage]:
    """Oldest first, each name's versions in their history (raycache._cache.order: fixed at
    their first commit, whatever a repair or compaction wrote since), so every policy sees one
    order."""
    return history(usages, lambda u: u.name, lambda u: u.place)


def picked(committed: list[Usage], now: float, retain: int | None,
           older_than: float | None) -> dict[str, str]:
    """Committed folders picked by retain (all but each name's newest `retain`) and older-than:
    id -> why."""
    out: dict[str, list[str]] = defaultdict(list)
    by_name: dict[str, list[Usage]] = defaultdict(list)
    for u in committed:
        by_name[u.name].append(u)
    for group in by_name.values():
        for i, u in enumerate(oldest_first(group)[::-1]):
            if retain is not None and i >= retain:
                out[u.id].append(f"not among the newest {retain} of {u.name!r}")
            age = now - u.place.first
            if older_than is not None and age > older_than:
                out[u.id].append(f"first committed {human_duration(age)} ago, older than "
                                 f"{human_duration(older_than)}")
    return {k: "; ".join(v) for k, v in out.items()}


def by_size(committed: list[Usage], total: int, limit: int, chosen: dict[str, str],
            guarded: Callable[[Usage], str | None]) -> None:
    """max-size: the oldest committed folders added to `chosen` until what stays (`total`
    bytes, less what goes already) fits in `limit`; a folder `guarded` keeps frees nothing."""
    doomed = {u.id for u in committed if u.id in chosen and guarded(u) is None}
    left = total - sum(u.own_bytes for u in committed if u.id in doomed)
    for u in oldest_first(committed):
        if left <= limit:
            break
        if u.id not in doomed:
            chosen[u.id] = f"oldest while the store's caches exceed {human_bytes(limit)}"
            left -= 0 if guarded(u) else u.own_bytes


def leased(u: Usage, now: float) -> str | None:
    """Why a fill in progress protects the folder (a lease refreshed lately), or None."""
    held = live(u.leases, now)
    return f"a fill is writing it (lease {', '.join(held)})" if held else None


def protected(u: Usage, newest: dict[str, str], include_newest: bool, now: float,
              grace_s: float | None) -> str | None:
    """Why a committed folder a policy picked stays, or None: a fill's lease, a run in
    progress, a run that died with a checkpoint younger than the grace, the newest of its
    name (`newest`: name -> id) unless include_newest."""
    if why := leased(u, now):
        return why
    if u.live_runs:
        return f"run(s) in progress read it: {', '.join(u.live_runs)}"
    waiting = [f"{name} (last written {human_duration(now - when)} ago)"
               for name, when in u.resumable_runs if grace_s is None or now - when <= grace_s]
    if waiting:
        return (f"run(s) that died with a checkpoint read it and can resume: "
                f"{', '.join(waiting)}; resume them, or pass a --grace (grace=...) shorter "
                f"than that to let it go")
    if newest.get(u.name) == u.id and not include_newest:
        return (f"the newest committed fingerprint of {u.name!r}; pass --include-newest "
                "(include_newest=True) to remove it")
    return None


def unknown(store: Store, found: list[Usage], going: set[str], now: float) -> dict[str, str]:
    """Names whose shard files stay wherever gc removes, as what may read them is not known:
    a kept manifest of a newer format (not read), a fill writing a new version (it may
    share the files of any committed one), or a run in progress on a version committed again
    since it started (it reads the earlier shard list) -> why, in words."""
    out = {}
    for u in found:
        if u.damaged and not u.corrupt and u.id not in going:
            out[u.name] = f"{u.id} (of a newer format: it may share them)"
        elif not u.committed and not u.damaged and leased(u, now):
            out[u.name] = f"the fill writing {u.id} (it may share them)"
        elif u.committed and u.live_since and _before(u.live_since, u.created):
            out[u.name] = (f"the run(s) in progress on {u.id}, started before its last commit "
                           "(they may read the files of its earlier shard list)")
    seen = {u.id for u in found}
    for name in store.listdir(store.root):  # a fill not yet past its plan: a lease alone
        for fp in store.listdir(store.path(name)):
            if f"{name}/{fp}" not in seen and lease_only(store, name, fp, now):
                out[name] = f"the fill writing {name}/{fp} (it may share them)"
    return out


def _before(a: str, b: str) -> bool:
    """Whether the ISO 8601 time `a` is before `b`."""
    return datetime.fromisoformat(a).timestamp() < datetime.fromisoformat(b).timestamp()

"""Garbage collection of a store: unfinished fills and stray files past a grace period, and old
fingerprints of each name by policy (retain, older-than, max-size), never what a live run
reads, nor a shard file that a kept version shares, nor (unless asked) a trained head (marked,
then removed)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from raycache._cache.committed import Cache
from raycache._cache.config import StoreConfig
from raycache._cache.manifest import human_bytes
from raycache._cache.manifests import read_manifest
from raycache._cache.opened import opened
from raycache._cache.store import MANIFEST, Store
from raycache._core.renamed import renamed_argument
from raycache._core.units import human_duration, parse_duration, parse_size
from raycache._errors import ConfigError, CorruptCache, RaycacheError
from raycache._upkeep.du import Usage, scan
from raycache._upkeep.policies import by_size, leased, oldest_first, picked, protected, unknown
from raycache._upkeep.refs import references
from raycache._upkeep.removal import Removal, hold, recheck, remove
from raycache._upkeep.strays import strays

__all__ = ["GcResult", "Removal", "Stray", "gc"]


@dataclass(frozen=True)
class Stray:
    """A file in a kept committed cache's folder that its manifest does not name
    (raycache._upkeep.strays), older than the grace period.

    Example:
        ```python
        for stray in raycache.gc(grace="1h").strays:  # a dry run
            print(stray.usage.id, stray.path, stray.bytes)
        ```
    """

    usage: Usage
    """The cache folder it is in."""
    path: str
    """Relative to the cache folder."""
    bytes: int
    """Its size."""
    age: float
    """Seconds since it was last written."""

    def line(self, verb: str) -> str:
        """The file as `raycache gc` prints it.

        Args:
            verb: What happens to it: "removed" or "would remove".

        Returns:
            One line: the file, its size and age.
        """
        return (f"{verb} {self.usage.id}/{self.path}  {human_bytes(self.bytes)}: stray (not in the "
                f"manifest), written {human_duration(self.age)} ago")


@dataclass
class GcResult:
    """What gc removed (delete=True) or would remove (a dry run), and what it kept and why.

    Example:
        ```python
        result = raycache.gc(retain=2)
        for line in result.lines():  # a dry run: what it would remove
            print(line)
        ```
    """

    removed: list[Removal] = field(default_factory=list)
    """The cache folders removed (or, in a dry run, that would be), with why."""
    kept: list[Removal] = field(default_factory=list)
    """Folders a policy picked but gc keeps (a live fill or run, the newest), with why."""
    deleted: bool = False
    """The folders were removed (delete=True); False: a dry run."""
    strays: list[Stray] = field(default_factory=list)
    """Stray files of the committed caches it keeps."""

    @property
    def bytes(self) -> int:
        """The bytes removed (or that would be): the folders' less shared files, the strays."""
        return sum(r.freed for r in self.removed) + sum(s.bytes for s in self.strays)

    def lines(self) -> list[str]:
        """The result as `raycache gc` prints it.

        Returns:
            One line per folder removed, stray file and folder kept, then a total.
        """
        verb = "removed" if self.deleted else "would remove"
        out = ([r.line(verb) for r in self.removed] + [s.line(verb) for s in self.strays]
               + [r.line("keep") for r in self.kept])
        what = f"{len(self.removed)} cache folder(s)"
        if self.strays:
            what += f" and {len(self.strays)} stray file(s)"
        if self.deleted:
            out.append(f"removed {what}, {human_bytes(self.bytes)} ({self.bytes} bytes)")
        else:
            out.append(f"dry run: would remove {what}, {human_bytes(self.bytes)} "
                       f"({self.bytes} bytes); pass --delete (delete=True) to remove them")
        return out


def gc(store: StoreConfig | str | None = None, retain: int | None = None,
       older_than: str | float | None = None, max_size: str | int | None = None,
       grace: str | float | None = "24h", delete: bool = False, include_newest: bool = False,
       now: float | None = None, damaged: bool = False, keep_runs: bool = True, *,
       keep_last: int | None = None) -> GcResult:
    """Remove (delete=True) or list (a dry run, the default) what the policies pick.

    - unfinished fills (no manifest) whose newest file is older than `grace` (None: none);
    - committed fingerprints beyond the newest `retain` of each name;
    - committed fingerprints first committed more than `older_than` ago ("7d", "24h", s);
    - the oldest committed fingerprints until the store's caches fit in `max_size` ("50GB");
    - in the committed caches it keeps, stray files (not named by the manifest) older than
      `grace` (None: none);
    - with `damaged`, caches whose manifest or shard list cannot be read (CorruptCache); else
      they are kept and listed, and a manifest of a newer format is never removed.

    Never a folder a live fill writes (its lease, raycache._cache.lease, whatever the grace),
    nor a cache a run in progress reads, nor one a run that died with a checkpoint reads
    while its record is younger than `grace` (it can still resume), nor the newest committed
    fingerprint of a name unless include_newest. A cache's runs (checkpoints of heads, which a
    server or a script may load) stay where the rest of its folder goes: its runs/ folder is
    kept (a head loads without its cache) unless keep_runs=False (`--remove-runs`).

    Versions share storage (format 5): the shard files that a kept version reads in another
    folder stay there while the rest of that folder goes (the manifest first), and so does
    every shard file of a name that a fill is writing a version of, or that has a kept
    manifest of a newer format (what they read is not known). Bytes count only what goes.

    Args:
        store: The store: its URI or a StoreConfig (or an opened one, `Cache.store`;
            $RAYCACHE_STORE, else .raycache/store, when None).
        retain: Remove committed fingerprints beyond the newest this many of each name.
        older_than: Remove committed fingerprints created longer ago ("7d", "24h", seconds).
        max_size: Remove the oldest committed fingerprints until the store fits ("50GB",
            bytes).
        grace: Age past which unfinished fills, stray files and the records of dead runs
            count as abandoned ("24h", seconds; None: never remove unfinished fills).
        delete: Remove; False lists what would go (a dry run).
        include_newest: The newest committed fingerprint of a name may go too.
        now: The time to measure ages from (seconds since the epoch; None: now).
        damaged: Remove caches whose manifest or shard list cannot be read.
        keep_runs: Keep the runs/ folder (trained heads, their records) of every cache folder
            it removes (the default); what is left there is no cache, and gc leaves it to you.
            False: the runs go with their cache.
        keep_last: The old name of `retain` (a DeprecationWarning; it goes in 0.3).

    Returns:
        What was removed (or would be), what was kept and why, and the bytes freed.

    Raises:
        ConfigError: retain, older_than, max_size or grace cannot be read (all listed).
        StoreError: The store's URI is a temporary folder or a file, or it cannot be read or
            written (StoreUnavailable: after its retries).

    Example:
        ```python
        raycache.gc(retain=2).lines()                         # a dry run: what would go
        raycache.gc(retain=2, older_than="30d", delete=True)  # remove it
        ```
    """
    retain = renamed_argument("keep_last", keep_last, "retain", retain, "raycache.gc")
    grace_s, older_s, limit = _arguments(retain, older_than, max_size, grace)
    store = opened(store)
    now = time.time() if now is None else now
    found, manifests = scan(store)
    result = GcResult(deleted=delete)
    _mark(store, found, now, retain, older_s, limit, grace_s, include_newest, damaged, result)
    going = {r.usage.id for r in result.removed}
    refs = references(m for k, m in manifests.items() if k not in going)
    for u in found:  # the strays of the committed folders kept (a repair's new shards: none)
        if u.committed and u.id not in going and not leased(u, now):
            _find_strays(store, u, now, grace_s, result, damaged and not u.live_runs,
                         set(refs.get(u.id, ())))
    result.removed = hold(store, result.removed, refs, unknown(store, found, going, now),
                          keep_runs)
    if delete:
        _sweep(store, found, refs, keep_runs, result)
    return result


def _arguments(retain: int | None, older_than: str | float | None,
               max_size: str | int | None, grace: str | float | None
               ) -> tuple[float | None, float | None, int | None]:
    """(grace, older_than, max_size) read as seconds and bytes; every bad value named in one
    ConfigError."""
    problems = []
    if retain is not None and (isinstance(retain, bool) or not isinstance(retain, int)
                               or retain < 0):
        problems.append(f"retain={retain!r}: expected a whole number >= 0, e.g. 3")
    grace_s = _parsed(parse_duration, grace, "grace", problems)
    older_s = _parsed(parse_duration, older_than, "older_than", problems)
    limit = _parsed(parse_size, max_size, "max_size", problems)
    if problems:
        raise ConfigError(problems)
    return grace_s, older_s, limit


def _mark(store: Store, found: list[Usage], now: float, retain: int | None,
          older_s: float | None, limit: int | None, grace_s: float | None,
          include_newest: bool, damaged: bool, result: GcResult) -> None:
    """The folders the policies pick, into `result.removed` (or `result.kept`, with why):
    damaged ones, unfinished fills past the grace, committed ones by retain, older-than
    and max-size."""
    committed = [u for u in found if u.committed]
    newest = {u.name: u.id for u in oldest_first(committed)}
    for u in found:
        held = leased(u, now)
        if u.damaged:
            why = (f"its manifest {store.url(f'{u.dir}/{MANIFEST}')} cannot be read"
                   if u.corrupt else u.damaged)
            _damaged(u, why, u.corrupt, damaged, held, result)
        elif not u.committed and grace_s is not None and now - u.newest > grace_s:
            if held:
                result.kept.append(Removal(u, f"unfinished fill: {held}"))
            else:
                result.removed.append(Removal(u, f"unfinished fill, newest file written "
                                                 f"{human_duration(now - u.newest)} ago"))
    chosen = picked(committed, now, retain, older_s)

    def guarded(u: Usage) -> str | None:
        return protected(u, newest, include_newest, now, grace_s)

    if limit is not None:
        total = sum(u.bytes for u in found) - sum(r.usage.own_bytes for r in result.removed)
        by_size(committed, total, limit, chosen, guarded)
    for u in committed:
        if u.id in chosen:
            why = guarded(u)
            (result.kept if why else result.removed).append(Removal(u, why or chosen[u.id]))


def _sweep(store: Store, found: list[Usage], refs: dict, keep_runs: bool,
           result: GcResult) -> None:
    """Remove what was marked, each folder after its name's leases and manifests are read
    again (one that must stay now is kept, with why), then the stray files."""
    swept = []
    listed = {u.id for u in found if u.committed or u.damaged}
    for r in result.removed:
        again, why = recheck(store, r, refs, listed, keep_runs)
        if again is None:
            result.kept.append(Removal(r.usage, why))
            continue
        remove(store, again)
        swept.append(again)
    result.removed = swept
    for s in result.strays:
        store.rm(f"{s.usage.dir}/{s.path}")


def _damaged(u: Usage, why: str, corrupt: bool, remove: bool, leased: str | None,
             result: GcResult) -> None:
    """A cache whose manifest or shard list cannot be read: removed when it is corrupt (not of
    a newer format), asked (`remove`) and no fill holds it; else kept, with why."""
    if corrupt and remove and not leased:
        result.removed.append(Removal(u, f"damaged: {why}"))
    elif corrupt:
        result.kept.append(Removal(u, f"damaged: {why}; "
                                      f"{leased or 'pass --damaged to remove it'}"))
    else:
        result.kept.append(Removal(u, f"not read: {why}"))


def _find_strays(store: Store, u: Usage, now: float, grace_s: float | None, result: GcResult,
                 remove_damaged: bool, referenced: set[str]) -> None:
    """Add a kept committed cache's stray files older than the grace to `result.strays` (none
    with no grace; files that other kept versions read, `referenced`, are none); a cache whose
    shard list cannot be read is removed (`remove_damaged`) or kept as it is, with the
    reason."""
    try:
        manifest = read_manifest(store, u.dir)
        if manifest is None:  # removed meanwhile
            return
        found = strays(Cache(store, manifest), referenced)
    except CorruptCache as exc:
        _damaged(u, f"{exc.uri} cannot be read", True, remove_damaged, None, result)
        return
    except RaycacheError as exc:
        result.kept.append(Removal(u, f"stray files not looked for: {exc}"))
        return
    if grace_s is None:
        return
    result.strays += [Stray(u, rel, size, now - mtime) for rel, (size, mtime) in found.items()
                      if now - mtime > grace_s]


def _parsed(parse: Callable[[Any, str], float], value: Any, what: str, problems: list[str]
            ) -> Any:
    """parse(value) (None stays None); a problem is added to `problems`, not raised, so every
    bad value is named at once."""
    if value is None:
        return None
    try:
        return parse(value, what)
    except ConfigError as exc:
        problems += exc.problems
        return None

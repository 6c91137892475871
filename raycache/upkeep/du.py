"""What a store holds: each cache folder's bytes, rows, shards, state and runs (raycache du)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from datetime import UTC, datetime

from raycache.cache.committed import Cache, read_manifest
from raycache.cache.lease import LEASES
from raycache.cache.manifest import human_bytes
from raycache.cache.store import MANIFEST, PROGRESS, RUNS, SHARDS, Store
from raycache.errors import CorruptCache, DamagedCacheWarning, StoreError
from raycache.train.runs import RECORD, RESUMABLE, list_runs

__all__ = ["Usage", "du"]


@dataclass(frozen=True)
class Usage:
    """One cache folder <store>/<name>/<fingerprint>: committed (a manifest) or unfinished."""

    name: str
    fingerprint: str
    dir: str
    """The folder, in the store's filesystem form."""
    committed: bool
    rows: int | None
    """The manifest's rows; None for an unfinished fill."""
    shards: int
    bytes: int
    """Every file under the folder: shards, manifest, progress records, runs."""
    runs_bytes: int
    """The part of `bytes` under runs/ (checkpoints, metrics of heads trained on it)."""
    created: str
    """The manifest's `created`; for an unfinished fill, when its newest file was written."""
    newest: float
    """Modification time of the newest file (seconds since the epoch)."""
    live_runs: tuple[str, ...] = ()
    """Runs in progress on it (status running, their driver alive)."""
    resumable_runs: tuple[tuple[str, float], ...] = ()
    """Runs on it that died with a checkpoint (they can resume): name, and when their record
    was last written (seconds since the epoch)."""
    leases: tuple[tuple[str, float], ...] = ()
    """Fills that hold a lease on it (raycache.cache.lease): lease name, and when it was last
    refreshed (seconds since the epoch); a stale one is listed too."""
    damaged: str = ""
    """Why its manifest cannot be read (empty when it can): not committed, not unfinished."""
    corrupt: bool = False
    """Damaged as in CorruptCache (gc --damaged removes it), not a manifest of a newer
    format."""

    @property
    def id(self) -> str:
        return f"{self.name}/{self.fingerprint}"

    @property
    def created_ts(self) -> float:
        return datetime.fromisoformat(self.created).timestamp()

    def line(self) -> str:
        state = "committed" if self.committed else "damaged" if self.damaged else "unfinished"
        rows = "-" if self.rows is None else str(self.rows)
        live = f"  live runs: {', '.join(self.live_runs)}" if self.live_runs else ""
        if self.resumable_runs:
            live += f"  resumable runs: {', '.join(n for n, _ in self.resumable_runs)}"
        return (f"{self.id:<40} {state:<10} {rows:>9} rows {self.shards:>5} shards "
                f"{human_bytes(self.bytes):>10}  runs {human_bytes(self.runs_bytes):>10}  "
                f"{self.created}{live}")


def _folder(store: Store, name: str, fp: str) -> Usage | None:
    """The usage of one folder, or None where it is not a cache (no manifest, shards or
    progress records: never raycache's to count or remove)."""
    cache_dir = store.cache_dir(name, fp)
    files = {p[len(cache_dir) + 1:]: info for p, info in store.files(cache_dir).items()}
    if not any(rel == MANIFEST or rel.startswith((f"{SHARDS}/", f"{PROGRESS}/"))
               for rel in files):
        return None
    newest = max(mtime for _, mtime in files.values())
    runs_bytes = sum(size for rel, (size, _) in files.items() if rel.startswith(f"{RUNS}/"))
    total = sum(size for size, _ in files.values())
    leases = tuple((rel.rsplit("/", 1)[1], mtime) for rel, (_, mtime) in files.items()
                   if rel.startswith(f"{LEASES}/"))
    why, corrupt = "", False
    try:
        manifest = read_manifest(store, cache_dir) if MANIFEST in files else None
    except StoreError as exc:  # damaged, or of a newer format: counted, never read
        manifest, why, corrupt = None, str(exc), isinstance(exc, CorruptCache)
        warnings.warn(why, DamagedCacheWarning, stacklevel=3)
    if manifest is None:
        shards = sum(rel.startswith(f"{SHARDS}/") and rel.endswith(".parquet") for rel in files)
        when = datetime.fromtimestamp(newest, UTC).isoformat(timespec="seconds")
        return Usage(name, fp, cache_dir, False, None, shards, total, runs_bytes, when, newest,
                     leases=leases, damaged=why, corrupt=corrupt)
    live: tuple[str, ...] = ()
    resumable: tuple[tuple[str, float], ...] = ()
    if any(rel.startswith(f"{RUNS}/") and rel.endswith(f"/{RECORD}") for rel in files):
        runs = list_runs(Cache(store, manifest))
        live = tuple(r.name for r in runs if r.status == "running")
        resumable = tuple((r.name, files[f"{RUNS}/{r.name}/{RECORD}"][1]) for r in runs
                          if r.status in RESUMABLE)
    return Usage(name, fp, cache_dir, True, manifest.rows, manifest.shard_count, total,
                 runs_bytes, manifest.created, newest, live, resumable, leases)


def du(store: Store | str | None = None) -> list[Usage]:
    """Every cache folder of a store, committed or unfinished, by name then age (oldest first)."""
    from raycache.cache.config import default_store

    store = store if isinstance(store, Store) else Store(store or default_store())
    store.check_folder()
    found = [u for name in store.listdir(store.root) for fp in store.listdir(store.path(name))
             if (u := _folder(store, name, fp)) is not None]
    return sorted(found, key=lambda u: (u.name, u.created_ts))

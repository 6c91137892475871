"""What a store holds: each cache folder's bytes, rows, shards, state and runs (raycache du)."""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime

from raycache._cache.committed import Cache
from raycache._cache.config import StoreConfig
from raycache._cache.entry_rows import is_shared, label
from raycache._cache.lease import LEASES
from raycache._cache.manifest import Manifest, human_bytes
from raycache._cache.manifests import read_manifest
from raycache._cache.order import Place, place_of
from raycache._cache.store import MANIFEST, PROGRESS, RUNS, SHARDS, Store
from raycache._core.caller import warn
from raycache._errors import CorruptCache, DamagedCacheWarning, StoreError
from raycache._train.folder.record import RECORD, RESUMABLE, list_runs
from raycache._upkeep.refs import Refs, references

__all__ = ["Usage", "du", "scan"]


@dataclass(frozen=True)
class Usage:
    """One cache folder `<store>/<name>/<fingerprint>`: committed (a manifest) or unfinished.

    Example:
        ```python
        for u in raycache.du():
            print(u.line())
        big = max(raycache.du(), key=lambda u: u.own_bytes)
        ```
    """

    name: str
    """The cache's name."""
    fingerprint: str
    """The version's fingerprint (its folder's name)."""
    dir: str
    """The folder, in the store's filesystem form."""
    committed: bool
    """It has a readable manifest."""
    rows: int | None
    """The manifest's rows; None for an unfinished fill."""
    shards: int
    """Its shard files (the manifest's count, for a committed cache)."""
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
    """Fills that hold a lease on it (raycache._cache.lease): lease name, and when it was last
    refreshed (seconds since the epoch); a stale one is listed too."""
    damaged: str = ""
    """Why its manifest cannot be read (empty when it can): not committed, not unfinished."""
    corrupt: bool = False
    """Damaged as in CorruptCache (gc --damaged removes it), not a manifest of a newer
    format."""
    lent_bytes: int = 0
    """The part of `bytes` that other committed versions read (format 5 shares): shard files
    that stay when this folder's own version goes."""
    shared_bytes: int = 0
    """Bytes of the shard files in other versions' folders that its manifest reads (counted
    in those folders' `bytes`, not here)."""
    live_since: str = ""
    """When the earliest run in progress on it started (empty: none): a run reads the shard
    list it found then, which a later repair or compaction may have replaced."""
    recorded: Place | None = None
    """Its place in its name's history as its manifest records it (raycache._cache.order),
    fixed at its first commit; None where not committed."""

    @property
    def place(self) -> Place:
        """Where it stands among its name's versions: gc's retain, older-than and max-size
        go by it, never by a `created` that a repair or compaction rewrote."""
        return self.recorded or place_of(self.fingerprint, self.created, {})

    @property
    def own_bytes(self) -> int:
        """The part of `bytes` no other version reads: what removing this folder frees."""
        return self.bytes - self.lent_bytes

    @property
    def state(self) -> str:
        """committed, damaged, shared (no manifest, shard files that other versions read) or
        unfinished."""
        if self.committed or self.damaged:
            return "committed" if self.committed else "damaged"
        return "shared" if self.lent_bytes else "unfinished"

    @property
    def id(self) -> str:
        """"name/fingerprint", as `raycache ls` and gc name it."""
        return f"{self.name}/{self.fingerprint}"

    @property
    def created_ts(self) -> float:
        """`created` in seconds since the epoch."""
        return datetime.fromisoformat(self.created).timestamp()

    def line(self) -> str:
        """The folder in one line, as `raycache du` prints it.

        Returns:
            Its id, state, rows, shards, bytes, runs' bytes, created, sharing and live runs.
        """
        state = self.state
        rows = "-" if self.rows is None else str(self.rows)
        return (f"{self.id:<40} {state:<10} {rows:>9} rows {self.shards:>5} shards "
                f"{human_bytes(self.bytes):>10}  runs {human_bytes(self.runs_bytes):>10}  "
                f"{self.created}{self.notes()}")

    def notes(self) -> str:
        """What `line` adds after the created time: sharing, live and resumable runs.

        Returns:
            Each note after two spaces; "" where there is none.
        """
        live = f"  live runs: {', '.join(self.live_runs)}" if self.live_runs else ""
        if self.resumable_runs:
            live += f"  resumable runs: {', '.join(n for n, _ in self.resumable_runs)}"
        return f"{self._sharing()}{live}"

    def _sharing(self) -> str:
        """What it holds alone and shares, where it shares anything (format 5)."""
        if not (self.lent_bytes or self.shared_bytes):
            return ""
        out = f"  {human_bytes(self.own_bytes)} own"
        if self.lent_bytes:
            out += f", {human_bytes(self.lent_bytes)} read by other versions too"
        if self.shared_bytes:
            out += f", {human_bytes(self.shared_bytes)} shared from other versions"
        return out


Found = tuple[Usage, Manifest | None, dict[str, int]]
"""A folder's usage, its manifest (None: not committed) and its files' sizes (relative
paths)."""


def _folder(store: Store, name: str, fp: str) -> Found | None:
    """The usage of one folder (before sharing is counted), or None where it is not a cache
    (no manifest, shards or progress records: never raycache's to count or remove)."""
    cache_dir = store.cache_dir(name, fp)
    files = {p[len(cache_dir) + 1:]: info for p, info in store.files(cache_dir).items()}
    if not any(rel == MANIFEST or rel.startswith((f"{SHARDS}/", f"{PROGRESS}/"))
               for rel in files):
        return None
    newest = max(mtime for _, mtime in files.values())
    runs_bytes = sum(size for rel, (size, _) in files.items() if rel.startswith(f"{RUNS}/"))
    sizes = {rel: size for rel, (size, _) in files.items()}
    total = sum(sizes.values())
    leases = tuple((rel.rsplit("/", 1)[1], mtime) for rel, (_, mtime) in files.items()
                   if rel.startswith(f"{LEASES}/"))
    why, corrupt = "", False
    try:
        manifest = read_manifest(store, cache_dir) if MANIFEST in files else None
    except StoreError as exc:  # damaged, or of a newer format: counted, never read
        manifest, why, corrupt = None, str(exc), isinstance(exc, CorruptCache)
        warn(why, DamagedCacheWarning)
    if manifest is None:
        shards = sum(rel.startswith(f"{SHARDS}/") and rel.endswith(".parquet") for rel in files)
        when = datetime.fromtimestamp(newest, UTC).isoformat(timespec="seconds")
        return (Usage(name, fp, cache_dir, False, None, shards, total, runs_bytes, when, newest,
                      leases=leases, damaged=why, corrupt=corrupt), None, sizes)
    live: tuple[str, ...] = ()
    since = ""
    resumable: tuple[tuple[str, float], ...] = ()
    if any(rel.startswith(f"{RUNS}/") and rel.endswith(f"/{RECORD}") for rel in files):
        runs = list_runs(Cache(store, manifest))
        live = tuple(r.name for r in runs if r.status == "running")
        since = min((r.started for r in runs if r.status == "running" and r.started),
                    default="")
        resumable = tuple((r.name, files[f"{RUNS}/{r.name}/{RECORD}"][1]) for r in runs
                          if r.status in RESUMABLE)
    return (Usage(name, fp, cache_dir, True, manifest.rows, manifest.shard_count, total,
                  runs_bytes, manifest.created, newest, live, resumable, leases,
                  live_since=since, recorded=manifest.place), manifest, sizes)


def scan(store: Store) -> tuple[list[Usage], dict[str, Manifest]]:
    """Every cache folder of a store (as du lists them) and the committed manifests, by id."""
    store.check_folder()
    found = [f for name in store.listdir(store.root) for fp in store.listdir(store.path(name))
             if (f := _folder(store, name, fp)) is not None]
    manifests = {u.id: m for u, m, _ in found if m is not None}
    refs = references(manifests.values())
    usages = [_with_sharing(u, m, sizes, refs) for u, m, sizes in found]
    return sorted(usages, key=lambda u: (u.name, u.place)), manifests


def _with_sharing(u: Usage, manifest: Manifest | None, sizes: dict[str, int], refs: Refs) -> Usage:
    """The usage with the bytes other versions read of it, and that it reads of theirs."""
    lent = sum(sizes.get(path, 0) for path, readers in refs.get(u.id, {}).items()
               if readers - {u.id})
    shared = 0
    if manifest is not None:
        with contextlib.suppress(CorruptCache):  # no shard list: nothing known to share
            shared = sum({label(e): e.bytes for e in manifest.shards
                          if is_shared(e)}.values())
    return dataclasses.replace(u, lent_bytes=lent, shared_bytes=shared)


def du(store: StoreConfig | str | None = None) -> list[Usage]:
    """What a store holds: every cache folder, committed or unfinished, with its bytes.

    A folder whose manifest cannot be read is listed as damaged, with one warning
    (DamagedCacheWarning) naming it.

    Args:
        store: The store: its URI or a StoreConfig (or an opened one, `Cache.store`;
            $RAYCACHE_STORE, else .raycache/store, when None).

    Returns:
        One Usage per folder, by name then age (oldest first), with the bytes versions share
        (format 5).

    Raises:
        StoreError: The store's URI is a temporary folder or a file, or cannot be read.
        StoreUnavailable: The store kept failing after its client's retries.

    Example:
        ```python
        for usage in raycache.du("s3://my-bucket/raycache"):
            print(usage.line())
        ```
    """
    from raycache._cache.opened import opened

    store = opened(store)
    return scan(store)[0]

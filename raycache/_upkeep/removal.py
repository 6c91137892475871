"""gc's removal: each picked folder removed, its manifest first, but for the files that kept
versions read; the name's leases and manifests read again just before, so that a fill that
started (or committed) since gc looked keeps every shard file it may share."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass, field

from raycache._cache.lease import LEASES, live
from raycache._cache.manifest import human_bytes
from raycache._cache.store import MANIFEST, PROGRESS, RUNS, SHARDS, Store
from raycache._upkeep.du import Usage
from raycache._upkeep.refs import Refs

__all__ = ["ORDER", "Removal", "hold", "lease_only", "recheck", "remove"]



@dataclass(frozen=True)
class Removal:
    """A cache folder gc removes (or would), or keeps although a policy picked it, and why.

    Example:
        ```python
        for removal in raycache.gc(retain=2).removed:  # a dry run
            print(removal.usage.id, removal.freed, removal.reason)
        ```
    """

    usage: Usage
    """The cache folder."""
    reason: str
    """Why a policy picked it, or why it is kept all the same."""
    held: dict[str, int] = field(default_factory=dict)
    """Files of the folder that kept versions read (format 5 shares), relative to it -> bytes:
    they stay, the rest of the folder goes."""
    readers: str = ""
    """Which versions read them, in words."""

    @property
    def freed(self) -> int:
        """Bytes it removes: the folder's, less those of the files that stay."""
        return self.usage.bytes - sum(self.held.values())

    def line(self, verb: str) -> str:
        """The folder as `raycache gc` prints it.

        Args:
            verb: What happens to it: "removed", "would remove" or "keep".

        Returns:
            One line: the folder, the bytes it frees, why, and the files that stay.
        """
        u = self.usage
        runs = f", {human_bytes(u.runs_bytes)} of runs" if u.runs_bytes else ""
        out = f"{verb} {u.id}  {human_bytes(self.freed)}{runs}: {self.reason}"
        if self.held:
            out += (f"; {len(self.held)} file(s), {human_bytes(sum(self.held.values()))}, "
                    f"stay: read by {self.readers}")
        return out


def lease_only(store: Store, name: str, fp: str, now: float) -> bool:
    """Whether a cache folder holds a live lease: a fill writing it (or, where no cache is
    there yet, planning it)."""
    folder = f"{store.cache_dir(name, fp)}/{LEASES}"
    return bool(live([(p.rsplit("/", 1)[-1], when)
                      for p, (_, when) in store.files(folder).items()], now))


def hold(store: Store, removals: list[Removal], refs: Refs, unknown: dict[str, str],
         runs: bool = True) -> list[Removal]:
    """Mark, in each removal, the files that kept versions read (`refs`, and every shard file
    of a name in `unknown`), and with `runs` its trained heads (runs/): they stay. A folder
    whose every file stays is not removed."""
    out = []
    for r in removals:
        u = r.usage
        read = refs.get(u.id, {})
        heads = runs and u.runs_bytes > 0
        if not read and u.name not in unknown and not heads:
            out.append(r)
            continue
        sizes = {p[len(u.dir) + 1:]: size for p, (size, _) in store.files(u.dir).items()}
        held = {rel: size for rel, size in sizes.items()
                if rel in read or (u.name in unknown and rel.startswith(f"{SHARDS}/"))
                or (heads and rel.startswith(f"{RUNS}/"))}
        if not held:
            out.append(r)
        elif len(held) < len(sizes):
            readers = sorted({v for rel in held for v in read.get(rel, ())})
            if u.name in unknown:
                readers.append(unknown[u.name])
            if heads:
                readers.append("its trained heads, kept (runs/; --remove-runs removes them)")
            out.append(dataclasses.replace(r, held=held, readers=", ".join(readers)))
    return out


def recheck(store: Store, r: Removal, refs: Refs, seen: set[str], runs: bool = True
            ) -> tuple[Removal | None, str]:
    """The removal `r` again, just before it goes, with its name's leases and manifests read
    anew: (None, why) where a fill now writes its very folder (a repair, a compaction); every
    shard file of the name held where a fill of another version started since gc looked, or a
    version not among the manifests it saw (`seen`, ids) was committed since (either may
    share any of them); else `r` as it was."""
    u, now, why = r.usage, time.time(), ""
    for fp in store.listdir(store.path(u.name)):
        cid = f"{u.name}/{fp}"
        if lease_only(store, u.name, fp, now):
            if fp == u.fingerprint:
                return None, f"a fill started on it after gc looked ({cid})"
            why = f"the fill writing {cid} (started after gc looked: it may share them)"
        elif cid not in seen and fp != u.fingerprint and store.exists(
                f"{store.cache_dir(u.name, fp)}/{MANIFEST}"):
            why = f"{cid} (committed after gc looked: it may share them)"
    if not why:
        return r, ""
    out = hold(store, [r], refs, {u.name: why}, runs)
    return (out[0], "") if out else (None, f"every file of it stays: {why}")


def remove(store: Store, r: Removal) -> None:
    """The manifest first, so readers stop seeing a committed cache before its shards go; then
    every file but those kept versions read (r.held)."""
    u = r.usage
    if u.committed or u.damaged:
        with contextlib.suppress(FileNotFoundError):
            store.rm(f"{u.dir}/{MANIFEST}")
    if not r.held:
        store.rm(u.dir)
        return
    _remove_but(store, u.dir, "", set(r.held))


ORDER = {RUNS: 0, SHARDS: 1, PROGRESS: 3}
"""What goes first where a folder is removed but for some files: runs, then shards, the shard
list and other files, progress records last."""


def _remove_but(store: Store, folder: str, rel: str, held: set[str]) -> None:
    """Everything under `folder`/`rel` but the files `held` (relative to `folder`)."""
    base = f"{folder}/{rel}" if rel else folder
    for name in sorted(store.listdir(base), key=lambda n: (ORDER.get(n, 2), n)):
        path = f"{rel}/{name}" if rel else name
        if path in held:
            continue
        if any(h.startswith(f"{path}/") for h in held):
            _remove_but(store, folder, path, held)
        else:
            with contextlib.suppress(FileNotFoundError):
                store.rm(f"{folder}/{path}")



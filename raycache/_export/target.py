"""Where an export's file goes: its bucket checked (never created), its temporary file beside it
named so that a killed export's leftovers are found and swept, and the finished file moved over
the old one so that a reader (or a kill) sees the old file or the new, never neither."""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
import time
import uuid
from datetime import datetime
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from raycache._errors import RaycacheError

__all__ = ["BUCKETED", "STALE_S", "TEMP", "bucket_problem", "make_folder", "replace", "sweep",
           "temp_path", "unwritable"]

TEMP = ".raycache-export-"
"""A temporary file's name begins so: `.raycache-export-<32 hex>-<the target's name>`, beside
the target (removed on failure; swept by a later export to the same target once stale)."""
STALE_S = 30 * 60.0
"""A temporary file of the same target untouched this long is a killed export's: a live export
writes its file as it goes, and moves it into place as soon as it is whole."""
BUCKETED = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss"})
"""Object stores whose first path part is a bucket (or container): made by their owner, never
by an export; their folders need no making."""


def _protocols(fs: fsspec.AbstractFileSystem) -> set[str]:
    return {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)


def bucket_problem(fs: fsspec.AbstractFileSystem, path: str, to: str) -> list[str]:
    """A target in a bucket that does not exist (a typo): named, with the fix; [] otherwise."""
    if not _protocols(fs) & BUCKETED:
        return []
    bucket = path.split("/", 1)[0]
    if fs.exists(bucket):
        return []
    return [f"export target {to!r}: bucket {bucket!r} does not exist (or these credentials "
            "cannot see it), and export never creates one; check its spelling, or create it "
            "first (e.g. `aws s3 mb s3://<bucket>`)"]


def make_folder(fs: fsspec.AbstractFileSystem, folder: str, to: str = "") -> None:
    """The target's folder made where the filesystem has folders (never a bucket); one that
    cannot be made is a RaycacheError naming it."""
    if folder and not _protocols(fs) & BUCKETED:
        try:
            fs.makedirs(folder, exist_ok=True)
        except OSError as exc:
            raise unwritable(to or folder, exc) from None


def unwritable(to: str, exc: OSError) -> RaycacheError:
    """The error for a target that cannot be written (`exc`, the filesystem's), in one line."""
    why = exc.strerror or str(exc) or type(exc).__name__
    where = f": {exc.filename!r}" if getattr(exc, "filename", None) else ""
    return RaycacheError(f"export target {to!r} cannot be written ({why}{where}); name a file "
                         "in a folder you may write to, or one that can be made")


def temp_path(path: str) -> str:
    """A new temporary file's path for the target `path`, beside it."""
    folder, base = posixpath.split(path)
    return posixpath.join(folder, f"{TEMP}{uuid.uuid4().hex}-{base}")


def sweep(fs: fsspec.AbstractFileSystem, path: str, now: float | None = None) -> list[str]:
    """Remove the temporary files that killed exports to `path` left beside it (their name's
    pattern, `path`'s own name, untouched for STALE_S); the paths removed. Nothing else in the
    folder is looked at twice."""
    folder, base = posixpath.split(path)
    pattern = re.compile(re.escape(TEMP) + r"[0-9a-f]{32}-" + re.escape(base))
    now = time.time() if now is None else now
    fs.invalidate_cache(folder)  # other processes write here: no cached listing
    try:
        entries = fs.ls(folder or fs.root_marker, detail=True)
    except FileNotFoundError:
        return []
    removed = []
    for info in entries:
        name = str(info["name"]).rstrip("/")
        if (info.get("type") == "file" and pattern.fullmatch(posixpath.basename(name))
                and now - _mtime(fs, name, info) > STALE_S):
            with contextlib.suppress(FileNotFoundError):  # another export swept it
                fs.rm_file(name)
                removed.append(name)
    return removed


def _mtime(fs: fsspec.AbstractFileSystem, path: str, info: dict[str, Any]) -> float:
    """When a file was last written, in seconds since the epoch, from its listing's entry."""
    when = next((info[k] for k in ("mtime", "LastModified", "last_modified", "updated")
                 if info.get(k) is not None), None)
    if when is None:
        when = fs.modified(path)
    if isinstance(when, str):
        when = datetime.fromisoformat(when.replace("Z", "+00:00"))
    return when.timestamp() if isinstance(when, datetime) else float(when)


def replace(fs: fsspec.AbstractFileSystem, temp: str, path: str) -> None:
    """The whole file at `temp` moved to `path`, over what is there: a rename locally (atomic);
    elsewhere the filesystem's move, a copy then a delete on object stores, where the copy
    replaces the old object whole. Where the move refuses an existing target (an SFTP server),
    the old file is moved aside first and back if the new cannot follow, so it is never lost:
    a kill between the two leaves it under its name plus `.replaced`."""
    if isinstance(fs, LocalFileSystem):
        os.replace(temp, path)
        return
    try:
        fs.mv(temp, path)
        return
    except Exception:  # each filesystem raises its own types
        if not fs.exists(path) or not fs.exists(temp):
            raise
    aside = f"{temp}.replaced"
    fs.mv(path, aside)
    try:
        fs.mv(temp, path)
    except BaseException:
        fs.mv(aside, path)
        raise
    with contextlib.suppress(FileNotFoundError):
        fs.rm_file(aside)

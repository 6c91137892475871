"""Listing a source's files with their versions (size, modification time or ETag, an S3
VersionId), telling their format, and re-checking them before a commit."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import fsspec

from raycache._core.secrets import Resolved, resolve, resolved
from raycache._core.transient import is_transient
from raycache._core.workdir import temporary_path_problem
from raycache._errors import FingerprintError, RaycacheError, SourceError, StoreUnavailable
from raycache._source.config import FILE_FORMATS, SourceConfig
from raycache._source.file import SourceFile

__all__ = ["SUFFIXES", "changes", "check_unchanged", "list_files", "unavailable"]

SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl", ".json": "jsonl",
            ".ndjson": "jsonl", ".csv": "csv"}


def list_files(cfg: SourceConfig) -> tuple[str, list[SourceFile]]:
    """The format and every file of the source, sorted, each with size and mtime or ETag and
    the source's options resolved once for them all (`SourceFile.access`)."""
    paths = [cfg.path] if isinstance(cfg.path, str) else list(cfg.path)
    access = resolved(cfg.options)
    files: dict[str, SourceFile] = {}
    for path in paths:
        try:
            files.update(_listed(path, cfg, access))
        except RaycacheError:
            raise
        except Exception as exc:  # each filesystem raises its own types (botocore's, ...)
            if is_transient(exc):
                raise unavailable(path, exc) from exc
            raise SourceError(
                f"source path {path!r} cannot be listed ({type(exc).__name__}: {exc}); check "
                "the path, and the endpoint and credentials in source.options (fsspec options, "
                "as in store.options)"
            ) from exc
    if not files:
        raise SourceError(f"source path {cfg.path!r} holds no files; point it at data files")
    fmt = cfg.format or _infer_format(sorted(files))
    return fmt, [files[k] for k in sorted(files)]


def _listed(path: str, cfg: SourceConfig, access: Resolved) -> dict[str, SourceFile]:
    """The files of one source path (a file, folder or glob), by URI."""
    fs, root = fsspec.core.url_to_fs(path, **access.fsspec)
    exists = _has_magic(root) or fs.exists(root)
    found = (fs.glob(root) if _has_magic(root) else [root]) if exists else []
    if not found and (problem := temporary_path_problem("source path", path, _SHIP)):
        raise SourceError(problem)
    if not found:
        what = "matches no files" if _has_magic(root) else "does not exist"
        raise SourceError(f"source path {path!r} {what}; check the path (a file, folder or glob)")
    files = {}
    for p in found:
        infos = fs.find(p, detail=True).values() if fs.isdir(p) else [fs.info(p)]
        for info in infos:
            name = info["name"]
            if name.rsplit("/", 1)[-1].startswith(("_", ".")):
                continue
            uri = fs.unstrip_protocol(name) if "://" in path else name
            files[uri] = SourceFile(uri, int(info["size"]), _version(info, uri, cfg),
                                    access=access)
    return _pinned(files, cfg, access) if "s3" in fs.protocol else files


def _pinned(files: dict[str, SourceFile], cfg: SourceConfig, access: Resolved
            ) -> dict[str, SourceFile]:
    """On S3, each file with the VersionId its bucket gives it (versioning on), its size and
    ETag from the same answer; files of an unversioned bucket as they are."""
    fs = fsspec.filesystem("s3", **{**access.fsspec, "version_aware": True})

    def pin(f: SourceFile) -> SourceFile:
        fs.invalidate_cache(f.uri)
        info = fs.info(f.uri)
        vid = info.get("VersionId")
        if not vid or vid == "null":  # unversioned (or written before versioning was on)
            return f
        return SourceFile(f.uri, int(info["size"]), _version(info, f.uri, cfg), str(vid),
                          access)

    with ThreadPoolExecutor(min(16, max(1, len(files)))) as pool:
        return dict(zip(files, pool.map(pin, files.values()), strict=True))


_SHIP = ("give an absolute path or a URI (the shipped configs: export RAYCACHE_DATA where `ray "
         "start` runs; jobs/README.md), or ship the file in the working_dir")


def _has_magic(path: str) -> bool:
    return any(c in path for c in "*?[")


def _version(info: dict[str, Any], uri: str, cfg: SourceConfig) -> str:
    """What fingerprints the file's content: its modification time or ETag, else the
    source.version the config names."""
    version = _stamp(info, uri) or cfg.version
    if version is None:
        raise FingerprintError(
            f"source file {uri!r} has no modification time or ETag to fingerprint; set "
            "source.version to a name for this version of the data"
        )
    return version


def _stamp(info: dict[str, Any], uri: str) -> str | None:
    """The file's modification time or ETag as the store reports it; None when it has none."""
    if "://" not in uri and info.get("mtime") is not None:
        return str(os.stat(uri).st_mtime_ns)  # full precision, not fsspec's float seconds
    for key in ("ETag", "etag", "mtime", "LastModified", "last_modified", "generation"):
        if info.get(key) is not None:
            value = info[key]
            return str(value.isoformat() if hasattr(value, "isoformat") else value)
    return None


def changes(files: list[SourceFile], options: dict[str, Any]) -> list[str]:
    """What changed in each of `files` since it was listed (its size, or its modification time
    or ETag, read again from the store, past any listing cache): one line per changed file.
    `options`: sealed or a Resolved, resolved once for files that hold no listing's own."""
    given = resolved(options)

    def change(f: SourceFile) -> str | None:
        opened = resolve(f.access if f.access is not None else given)
        if f.version_id:  # read by version: a newer one changes nothing; a removed one does
            fs, path = fsspec.core.url_to_fs(f.uri, **{**opened, "version_aware": True})
            try:
                fs.info(f"{path}?versionId={f.version_id}")
            except FileNotFoundError:
                return f"{f.uri!r}: its version {f.version_id} was removed"
            return None
        fs, path = fsspec.core.url_to_fs(f.uri, **opened)
        fs.invalidate_cache(path)
        try:
            info = fs.info(path)
        except FileNotFoundError:
            return f"{f.uri!r} was removed"
        size, version = int(info["size"]), _stamp(info, f.uri)
        if size != f.size:
            return f"{f.uri!r} changed size ({f.size} -> {size} bytes)"
        if version is not None and version != f.version:
            return f"{f.uri!r} changed version (modification time or ETag {f.version} -> {version})"
        return None

    try:
        if len(files) == 1:  # a read unit's own check: no pool to start
            return [c for c in map(change, files) if c]
        with ThreadPoolExecutor(min(16, max(1, len(files)))) as pool:
            return [c for c in pool.map(change, files) if c]
    except Exception as exc:  # each filesystem raises its own types
        if is_transient(exc):
            raise unavailable(files[0].uri if len(files) == 1 else "the source", exc) from exc
        raise


def unavailable(what: str, exc: BaseException) -> StoreUnavailable:
    """The error for a source whose object store kept failing after its retries."""
    return StoreUnavailable(
        f"source {what!r} could not be read: its object store kept failing after its retries "
        f"({type(exc).__name__}: {exc}). The service, not the data: run again (a fill resumes "
        "where it stopped); where it never answers, check the endpoint and credentials in "
        "source.options")


def check_unchanged(files: list[SourceFile], options: dict[str, Any], stopped: str) -> None:
    """A SourceError when any of `files` changed since it was listed; `stopped` says what the
    change stopped (e.g. "nothing was committed")."""
    changed = changes(files, options)
    if changed:
        raise SourceError(
            f"source file(s) changed since they were listed: {'; '.join(changed)}. Rows read "
            f"before and after a change would mix two versions of the data, so {stopped}. Run "
            "it again once the source stays still: a fill then makes a cache of the new contents"
        )


def _infer_format(uris: list[str]) -> str:
    kinds = set()
    for uri in uris:
        suffix = "." + uri.rsplit(".", 1)[-1].lower() if "." in uri.rsplit("/", 1)[-1] else ""
        if suffix not in SUFFIXES:
            raise SourceError(
                f"source file {uri!r}: cannot tell its format from the suffix; set source.format "
                f"to one of {FILE_FORMATS}"
            )
        kinds.add(SUFFIXES[suffix])
    if len(kinds) > 1:
        raise SourceError(f"source mixes formats {sorted(kinds)}; point it at one format")
    return kinds.pop()

"""Source files: listing with their versions, schema checks, and reading one file in slices."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pyarrow.parquet as pq

from raycache.config import SOURCE_FORMATS, SourceConfig
from raycache.errors import FingerprintError, SourceError

SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl", ".json": "jsonl",
            ".ndjson": "jsonl", ".csv": "csv"}


@dataclass(frozen=True)
class SourceFile:
    """One input file and the facts that say whether it changed."""

    uri: str
    size: int
    version: str

    @property
    def block(self) -> str:
        """Short stable id of this file's content version; names its shards."""
        text = f"{self.uri}|{self.size}|{self.version}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def describe(self) -> dict[str, Any]:
        return {"uri": self.uri, "size": self.size, "version": self.version}


def list_files(cfg: SourceConfig) -> tuple[str, list[SourceFile]]:
    """The format and every file of the source, sorted, each with size and mtime or ETag."""
    paths = [cfg.path] if isinstance(cfg.path, str) else list(cfg.path)
    files: dict[str, SourceFile] = {}
    for path in paths:
        fs, root = fsspec.core.url_to_fs(path, **cfg.options)
        exists = _has_magic(root) or fs.exists(root)
        found = (fs.glob(root) if _has_magic(root) else [root]) if exists else []
        if not found:
            raise SourceError(
                f"source path {path!r} does not exist; check the path (a file, folder or glob)"
            )
        for p in found:
            infos = fs.find(p, detail=True).values() if fs.isdir(p) else [fs.info(p)]
            for info in infos:
                name = info["name"]
                if name.rsplit("/", 1)[-1].startswith(("_", ".")):
                    continue
                uri = fs.unstrip_protocol(name) if "://" in path else name
                files[uri] = SourceFile(uri, int(info["size"]), _version(info, uri, cfg))
    if not files:
        raise SourceError(f"source path {cfg.path!r} holds no files; point it at data files")
    fmt = cfg.format or _infer_format(sorted(files))
    return fmt, [files[k] for k in sorted(files)]


def _has_magic(path: str) -> bool:
    return any(c in path for c in "*?[")


def _version(info: dict[str, Any], uri: str, cfg: SourceConfig) -> str:
    if "://" not in uri and info.get("mtime") is not None:
        return str(os.stat(uri).st_mtime_ns)  # full precision, not fsspec's float seconds
    for key in ("ETag", "etag", "mtime", "LastModified", "last_modified", "generation"):
        if info.get(key) is not None:
            value = info[key]
            return str(value.isoformat() if hasattr(value, "isoformat") else value)
    if cfg.version:
        return cfg.version
    raise FingerprintError(
        f"source file {uri!r} has no modification time or ETag to fingerprint; set "
        "source.version to a name for this version of the data"
    )


def _infer_format(uris: list[str]) -> str:
    kinds = set()
    for uri in uris:
        suffix = "." + uri.rsplit(".", 1)[-1].lower() if "." in uri.rsplit("/", 1)[-1] else ""
        if suffix not in SUFFIXES:
            raise SourceError(
                f"source file {uri!r}: cannot tell its format from the suffix; set source.format "
                f"to one of {SOURCE_FORMATS}"
            )
        kinds.add(SUFFIXES[suffix])
    if len(kinds) > 1:
        raise SourceError(f"source mixes formats {sorted(kinds)}; point it at one format")
    return kinds.pop()


def read_schema(file: SourceFile, fmt: str, options: dict[str, Any]) -> pa.Schema:
    """The schema of one file, read cheaply (a footer, or the first block)."""
    with fsspec.open(file.uri, "rb", **options) as f:
        if fmt == "parquet":
            return pq.read_schema(f)
        reader = pjson.open_json(f) if fmt == "jsonl" else pcsv.open_csv(f)
        return reader.schema


@dataclass(frozen=True)
class Slice:
    """The unit of fill work: rows [offset, offset + rows) of one file; rows=None is the whole
    file (text formats, whose row count is known only once read)."""

    file: SourceFile
    offset: int = 0
    rows: int | None = None


def plan_slices(files: list[SourceFile], fmt: str, options: dict[str, Any], rows: int
                ) -> list[Slice]:
    """Parquet files split into slices of `rows` from their footers; other formats whole."""
    if fmt != "parquet":
        return [Slice(f) for f in files]
    out = []
    for f in files:
        with fsspec.open(f.uri, "rb", **options) as fh:
            n = pq.ParquetFile(fh).metadata.num_rows
        out += [Slice(f, o, min(rows, n - o)) for o in range(0, n, rows)]
    return out


def read_slice(s: Slice, fmt: str, options: dict[str, Any], rows: int) -> Iterator[
    tuple[int, int, pa.Table]
]:
    """(offset, rows in the file, table) pieces of at most `rows` rows, in file order."""
    with fsspec.open(s.file.uri, "rb", **options) as f:
        if fmt == "parquet":
            pf = pq.ParquetFile(f)
            total, start, groups, first = pf.metadata.num_rows, 0, [], None
            for i in range(pf.metadata.num_row_groups):
                n = pf.metadata.row_group(i).num_rows
                if start + n > s.offset and start < s.offset + s.rows:
                    groups.append(i)
                    first = start if first is None else first
                start += n
            table = pf.read_row_groups(groups) if groups else pf.schema_arrow.empty_table()
            yield s.offset, total, table.slice(s.offset - (first or 0), s.rows)
            return
        table = pjson.read_json(f) if fmt == "jsonl" else pcsv.read_csv(f)
    for offset in range(0, table.num_rows, rows):
        yield offset, table.num_rows, table.slice(offset, rows)


def check_columns(schema: pa.Schema, cfg: SourceConfig, inputs: list[str], uri: str) -> list[str]:
    """Problems with the key, label and encoder input columns of a schema."""
    have = schema.names
    wanted = [("key", cfg.key), *[("label", c) for c in cfg.labels]]
    wanted += [("input", c) for c in inputs]
    return [
        f"source.{role} column {col!r} is not in {uri!r}; its columns are {have}"
        for role, col in wanted
        if col not in have
    ]

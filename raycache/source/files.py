"""Source files: listing with their versions, schema checks, and reading them in units."""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pyarrow.parquet as pq

from raycache.core.secrets import reveal
from raycache.errors import FingerprintError, SourceError
from raycache.source.config import FILE_FORMATS, SourceConfig

__all__ = ["META", "Ranges", "SourceFile", "Span", "Unit", "check_columns", "list_files",
           "plan_units", "read_schema", "read_stage", "read_unit"]

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
        fs, root = fsspec.core.url_to_fs(path, **reveal(cfg.options))
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
                f"to one of {FILE_FORMATS}"
            )
        kinds.add(SUFFIXES[suffix])
    if len(kinds) > 1:
        raise SourceError(f"source mixes formats {sorted(kinds)}; point it at one format")
    return kinds.pop()


def read_schema(file: SourceFile, fmt: str, options: dict[str, Any]) -> pa.Schema:
    """The schema of one file, read cheaply (a footer, or the first block)."""
    with fsspec.open(file.uri, "rb", **reveal(options)) as f:
        if fmt == "parquet":
            return pq.read_schema(f)
        reader = pjson.open_json(f) if fmt == "jsonl" else pcsv.open_csv(f)
        return reader.schema


@dataclass(frozen=True, order=True)
class Span:
    """Rows [start, stop) of one file."""

    start: int
    stop: int


Ranges = tuple[Span, ...]
"""Row spans of one file, sorted and disjoint."""
META = ("__block", "__row", "__source", "__source_rows")
"""Columns the read stage adds to every row: where it came from, so shards can say so."""


@dataclass(frozen=True)
class Unit:
    """The unit of read work: whole row groups of a Parquet file (each decoded once), or a whole
    text file (its row count is known only once read), less the rows an earlier fill did."""

    file: SourceFile
    groups: tuple[int, ...] = ()
    """Parquet row groups, in order; empty for a text file."""
    start: int = 0
    """First row of the unit in the file."""
    rows: int | None = None
    """Rows in the unit (None for a text file)."""
    done: Ranges = ()
    """Rows of the unit already encoded, skipped when read."""

    def todo(self) -> int | None:
        if self.rows is None:
            return None
        end = self.start + self.rows
        return self.rows - sum(min(s.stop, end) - max(s.start, self.start)
                               for s in self.done if s.stop > self.start and s.start < end)


def plan_units(files: list[SourceFile], fmt: str, options: dict[str, Any], rows: int,
               done: dict[str, Ranges] | None = None) -> tuple[list[Unit], dict[str, int]]:
    """Read units of about `rows` rows, aligned to Parquet row groups (a row group larger than
    that is one unit, read in pieces), skipping units that `done` covers; and each Parquet
    file's row count."""
    done = done or {}
    units: list[Unit] = []
    totals: dict[str, int] = {}
    for f in files:
        skip = done.get(f.block, ())
        if fmt != "parquet":
            units.append(Unit(f, done=skip))
            continue
        with fsspec.open(f.uri, "rb", **reveal(options)) as fh:
            meta = pq.ParquetFile(fh).metadata
        totals[f.block] = meta.num_rows
        groups: list[int] = []
        start = first = 0
        for i in range(meta.num_row_groups):
            groups.append(i)
            start += meta.row_group(i).num_rows
            if start - first >= rows or i == meta.num_row_groups - 1:
                unit = Unit(f, tuple(groups), first, start - first, skip)
                if unit.todo():
                    units.append(unit)
                groups, first = [], start
    return units, totals


def read_unit(u: Unit, fmt: str, options: dict[str, Any], rows: int, columns: list[str]
              ) -> Iterator[pa.Table]:
    """The unit's rows not yet done, in pieces of at most `rows` rows, each with META columns."""
    with fsspec.open(u.file.uri, "rb", **reveal(options)) as f:
        if fmt == "parquet":
            pf = pq.ParquetFile(f)
            total, offset = pf.metadata.num_rows, u.start
            for batch in pf.iter_batches(batch_size=rows, row_groups=list(u.groups),
                                         columns=columns):
                yield from _tagged(pa.Table.from_batches([batch]), u, offset, total, columns)
                offset += batch.num_rows
            return
        table = pjson.read_json(f) if fmt == "jsonl" else pcsv.read_csv(f)
    for offset in range(0, table.num_rows, rows):
        yield from _tagged(table.slice(offset, rows), u, offset, table.num_rows, columns)


def _tagged(table: pa.Table, u: Unit, offset: int, total: int, columns: list[str]
            ) -> Iterator[pa.Table]:
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise SourceError(
            f"source file {u.file.uri!r} lacks columns {missing}; every file of a source needs "
            "the key, label and input columns"
        )
    row = np.arange(offset, offset + table.num_rows, dtype=np.int64)
    keep = np.ones(len(row), bool)
    for span in u.done:
        keep &= (row < span.start) | (row >= span.stop)
    if not keep.all():
        table, row = table.filter(pa.array(keep)), row[keep]
    n = len(row)
    if n == 0:
        return
    out = table.select(columns)
    for name, column in (("__block", pa.array([u.file.block] * n)), ("__row", pa.array(row)),
                         ("__source", pa.array([u.file.uri] * n)),
                         ("__source_rows", pa.array(np.full(n, total, np.int64)))):
        out = out.append_column(name, column)
    yield out


def read_stage(batch: pa.Table, fmt: str, options: dict[str, Any], rows: int,
               columns: list[str]) -> Iterator[pa.Table]:
    """Ray Data stage: units in (pickled, one per row), row pieces out."""
    for item in batch.column("unit").to_pylist():
        yield from read_unit(pickle.loads(item), fmt, options, rows, columns)


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

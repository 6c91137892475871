"""Source files read: their schemas, the units of read work (row groups, a text file) planned
and read as row pieces tagged with where they came from (listing them: `listing`)."""

from __future__ import annotations

import contextlib
import dataclasses
import pickle
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pyarrow.parquet as pq

from raycache._core import started
from raycache._core.secrets import resolved
from raycache._core.transient import is_transient
from raycache._errors import SourceError
from raycache._source.checks import check_columns, check_text_utf8, check_utf8
from raycache._source.file import SourceFile
from raycache._source.listing import SUFFIXES, changes, check_unchanged, list_files, unavailable
from raycache._source.listing import _version as _version  # the fingerprint tests' door

__all__ = ["JSON_READ", "META", "SUFFIXES", "Ranges", "SourceFile", "Span", "Unit", "changes",
           "check_columns", "check_unchanged", "list_files", "merged", "parse_text", "plan_units",
           "read_schema", "read_schemas", "read_stage", "read_unit"]

SCHEMA_BYTES = 1 << 20
"""A JSONL or CSV file's schema comes from its first SCHEMA_BYTES (pyarrow's block size) and
the rest of the line they end in, read into memory first: a streaming reader left on the open
file reads ahead on pyarrow's threads, and a process that exits while they wait on the file (a
command refusing the input, say) aborts with exit 134 ("terminate called without an active
exception")."""


def read_schema(file: SourceFile, fmt: str, options: dict[str, Any]) -> pa.Schema:
    """The schema of one file, read cheaply (a footer, or the first block)."""
    with _reading(file, fmt):
        with file.open(options) as f:
            if fmt == "parquet":
                return pq.read_schema(f)
            head = pa.BufferReader(f.read(SCHEMA_BYTES) + f.readline())
        reader = pjson.open_json(head) if fmt == "jsonl" else pcsv.open_csv(head)
        return reader.schema


def read_schemas(files: list[SourceFile], fmt: str, options: dict[str, Any]
                 ) -> list[pa.Schema]:
    """Every file's schema (read_schema), a few files at a time."""
    with ThreadPoolExecutor(min(16, max(1, len(files)))) as pool:
        return list(pool.map(lambda f: read_schema(f, fmt, options), files))


@contextlib.contextmanager
def _reading(file: SourceFile, fmt: str) -> Iterator[None]:
    """Errors of reading `file` as `fmt` (pyarrow's, a file gone) raised as SourceError."""
    try:
        yield
    except FileNotFoundError as exc:
        raise SourceError(
            f"source file {file.uri!r} was removed after the source was listed; run again "
            "once the source stays still"
        ) from exc
    except (pa.ArrowException, OSError) as exc:  # pyarrow raises OSError for corrupt data
        if is_transient(exc):
            raise unavailable(file.uri, exc) from exc
        if file.size == 0:
            needs = {"csv": "a header row", "jsonl": "one row", "parquet": "a footer"}[fmt]
            raise SourceError(
                f"source file {file.uri!r} is empty (0 bytes), and a {fmt} file needs at least "
                f"{needs}; remove it from the source, or write its rows"
            ) from exc
        form = " (one JSON object per line)" if fmt == "jsonl" else ""
        raise SourceError(
            f"source file {file.uri!r} cannot be read as {fmt} ({type(exc).__name__}: {exc}); "
            f"check that it is a whole, readable {fmt} file{form} whose columns keep one type "
            "in every row (set source.format where its suffix says otherwise), or remove it "
            "from the source"
        ) from exc


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
    """Rows in the unit (a text file's, counted when planned; None where not counted)."""
    done: Ranges = ()
    """Rows of the unit already encoded, skipped when read."""

    def todo(self) -> int | None:
        if self.rows is None:
            return None
        end = self.start + self.rows
        return self.rows - sum(min(s.stop, end) - max(s.start, self.start)
                               for s in self.done if s.stop > self.start and s.start < end)

    def cut(self, sizes: list[int]) -> tuple[list[Unit], Unit | None]:
        """The unit's first rows still to do as units of `sizes` rows each, in order, and the
        unit of the rows after them (None where none are left): each reads what this one reads
        and skips, as done, the rows the others hold. A unit of uncounted rows stays whole."""
        if self.rows is None:
            return [], self
        end, at, pieces = self.start + self.rows, self.start, []
        free = self._free()
        for size in sizes:
            first = None
            while size and free:  # take `size` rows from the spans still to do
                span = free.pop(0)
                first = span.start if first is None else first
                take = min(size, span.stop - span.start)
                size, at = size - take, span.start + take
                if at < span.stop:
                    free.insert(0, Span(at, span.stop))
            if first is None:
                break
            pieces.append(self._keeping(Span(first, at)))
        rest = self._keeping(Span(at, end))
        return pieces, rest if rest.todo() else None

    def _free(self) -> list[Span]:
        """The spans of the unit's rows still to do, in order."""
        assert self.rows is not None
        out, at = [], self.start
        for s in merged(list(self.done)):
            if s.start > at:
                out.append(Span(at, min(s.start, self.start + self.rows)))
            at = max(at, s.stop)
        if at < self.start + self.rows:
            out.append(Span(at, self.start + self.rows))
        return [s for s in out if s.stop > s.start]

    def _keeping(self, span: Span) -> Unit:
        """This unit with every row outside `span` marked done."""
        done = [*self.done, Span(self.start, span.start), Span(span.stop, self.start + self.rows)]
        return dataclasses.replace(self, done=merged(done))


def merged(spans: list[Span]) -> Ranges:
    """`spans` sorted, the overlapping and touching ones joined, the empty ones left out."""
    out: list[Span] = []
    for s in sorted(s for s in spans if s.stop > s.start):
        if out and s.start <= out[-1].stop:
            out[-1] = Span(out[-1].start, max(out[-1].stop, s.stop))
        else:
            out.append(s)
    return tuple(out)


def plan_units(files: list[SourceFile], fmt: str, options: dict[str, Any], rows: int,
               done: dict[str, Ranges] | None = None, key: str | None = None,
               known: dict[str, int] | None = None) -> tuple[list[Unit], dict[str, int]]:
    """Read units of about `rows` rows, aligned to Parquet row groups (a row group larger than
    that is one unit, read in pieces), skipping units that `done` covers; and each file's row
    count (a CSV or JSONL file is one unit, its rows counted by a streaming parse of its `key`
    column: the progress total, the in-process choice and the completeness check need it).
    A file whose row count is `known` and whose rows `done` covers is not opened at all."""
    done = done or {}
    units: list[Unit] = []
    totals: dict[str, int] = {}
    for f in files:
        skip = done.get(f.block, ())
        if f.block in (known or {}) and skip == (Span(0, known[f.block]),):
            totals[f.block] = known[f.block]
            continue
        if fmt != "parquet":
            totals[f.block] = count_rows(f, fmt, options, key)
            unit = Unit(f, start=0, rows=totals[f.block], done=skip)
            if unit.todo():
                units.append(unit)
            continue
        with _reading(f, fmt), f.open(options) as fh:
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


def count_rows(f: SourceFile, fmt: str, options: dict[str, Any], key: str | None = None) -> int:
    """Rows of a CSV or JSONL file: a JSONL file's lines that hold something; a CSV file's rows
    from a streaming parse of its `key` column as text (a quoted field may hold newlines)."""
    if fmt == "jsonl":
        with f.open(options) as fh:
            return _json_lines(fh)
    convert = pcsv.ConvertOptions(include_columns=[key] if key else [],
                                  column_types={key: pa.string()} if key else {})
    try:  # from Arrow's memory (SourceFile.whole): no reader of pyarrow's left on a file
        return sum(batch.num_rows for batch in pcsv.open_csv(pa.BufferReader(f.whole(options)),
                                                             convert_options=convert))
    except pa.ArrowInvalid as exc:
        raise SourceError(f"source file {f.uri!r} cannot be read as csv: {exc}; check the "
                          "file (or set source.format)") from exc


def _json_lines(fh: Any, chunk: int = 1 << 24) -> int:
    """Lines holding more than whitespace: a JSONL file's rows."""
    rows, tail = 0, b""
    while block := fh.read(chunk):
        lines = (tail + block).split(b"\n")
        tail = lines.pop()
        rows += sum(1 for line in lines if line.strip())
    return rows + bool(tail.strip())


JSON_READ = pjson.ReadOptions(use_threads=False)
"""pyarrow's threaded JSON parser can crash the process (a segfault, pyarrow 26) on a file whose
column types change part way; on one thread the same file is an ArrowInvalid, as it should be.
Fills parse their files in parallel already, one a task."""


def parse_text(data: pa.NativeFile, fmt: str) -> pa.Table:
    """A whole JSONL or CSV file's table (JSON parsed on one thread: JSON_READ)."""
    return pjson.read_json(data, read_options=JSON_READ) if fmt == "jsonl" else pcsv.read_csv(data)


def read_unit(u: Unit, fmt: str, options: dict[str, Any], rows: int, columns: list[str]
              ) -> Iterator[pa.Table]:
    """The unit's rows not yet done, in pieces of at most `rows` rows, each with META columns.
    A file changed since it was listed is a SourceError before any of it is read; the options
    resolved once for both."""
    options = resolved(options)
    check_unchanged([u.file], options, "the run stopped")
    if fmt == "parquet":
        with _reading(u.file, fmt), u.file.open(options) as f:
            pf = pq.ParquetFile(f)
            total, offset = pf.metadata.num_rows, u.start
            for batch in pf.iter_batches(batch_size=rows, row_groups=list(u.groups),
                                         columns=columns):
                yield from _tagged(pa.Table.from_batches([batch]), u, offset, total, columns)
                offset += batch.num_rows
        return
    with _reading(u.file, fmt):  # read whole, as the table is: parsed from Arrow's memory
        data = pa.BufferReader(u.file.whole(options))
        table = parse_text(data, fmt)
    (check_utf8 if fmt == "csv" else check_text_utf8)(table, u.file.uri, columns)
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
    if u.done:  # spans sorted and disjoint: the last span starting at or before each row
        starts = np.array([s.start for s in u.done], np.int64)
        stops = np.array([s.stop for s in u.done], np.int64)
        at = np.searchsorted(starts, row, side="right") - 1
        keep = (at < 0) | (row >= stops[np.maximum(at, 0)])
    if not keep.all():
        table, row = table.filter(pa.array(keep)), row[keep]
    n = len(row)
    if n == 0:
        return
    out = table.select(columns)
    for name, column in (("__block", pa.repeat(pa.scalar(u.file.block, pa.string()), n)),
                         ("__row", pa.array(row)),
                         ("__source", pa.repeat(pa.scalar(u.file.uri, pa.string()), n)),
                         ("__source_rows", pa.array(np.full(n, total, np.int64)))):
        out = out.append_column(name, column)
    yield out


def read_stage(batch: pa.Table, fmt: str, options: dict[str, Any], rows: int,
               columns: list[str]) -> Iterator[pa.Table]:
    """Ray Data stage: units in (pickled, one per row), row pieces out."""
    started.once("read")
    for item in batch.column("unit").to_pylist():
        yield from read_unit(pickle.loads(item), fmt, options, rows, columns)

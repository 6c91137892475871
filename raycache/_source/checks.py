"""Checks of a source's columns in each of its files: present, of one type in all of them,
and, in CSV, UTF-8 text."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from raycache._errors import SourceError
from raycache._source.config import SourceConfig

if TYPE_CHECKING:
    from raycache._source.file import SourceFile

__all__ = ["check_columns", "check_text_utf8", "check_types", "check_utf8"]


def check_columns(schema: pa.Schema, cfg: SourceConfig, inputs: list[str] | dict[str, str],
                  uri: str) -> list[str]:
    """Problems with the key, label and encoder input columns of a schema; `inputs`, each
    encoder input column, or the config field that names it -> the column (named so)."""
    have = schema.names
    wanted = [("source.key", cfg.key), *[("source.label", c) for c in cfg.labels]]
    wanted += (list(inputs.items()) if isinstance(inputs, dict)
               else [("encoder input", c) for c in inputs])
    out = [
        f"{field} column {col!r} is not in {uri!r}; its columns are {have}"
        for field, col in wanted
        if col not in have
    ]
    if cfg.key in have and pa.types.is_nested(key := schema.field(cfg.key).type):
        out.append(f"source.key column {cfg.key!r} is of type {key} in {uri!r}; a key is one "
                   "value per row (a string or an integer): name such a column as source.key")
    return out


def check_utf8(table: pa.Table | pa.Schema, uri: str, columns: list[str]) -> None:
    """A SourceError for a CSV column that pyarrow read as bytes: one of its values is not
    UTF-8 (only text that is UTF-8 reads as strings). Given a table, it names the row."""
    schema = table if isinstance(table, pa.Schema) else table.schema
    for col in columns:
        if col not in schema.names or not (pa.types.is_binary(schema.field(col).type)
                                           or pa.types.is_large_binary(schema.field(col).type)):
            continue
        where = ""
        if isinstance(table, pa.Table):
            for i, value in enumerate(table.column(col).to_pylist()):
                try:
                    (value or b"").decode()
                except UnicodeDecodeError:
                    where = f" (data row {i + 1}: {value[:40]!r})"
                    break
        raise SourceError(
            f"source file {uri!r}: column {col!r} holds text that is not UTF-8{where}; "
            "raycache reads CSV as UTF-8: re-encode the file (e.g. iconv -f latin1 -t utf-8 "
            "in.csv > out.csv) and point source.path at the result"
        )


def check_text_utf8(table: pa.Table, uri: str, columns: list[str], fmt: str = "jsonl") -> None:
    """A SourceError naming the row for a text column whose bytes are not UTF-8 (pyarrow's
    JSON reader keeps them as strings unchecked, so a later read would raise
    UnicodeDecodeError); one full validation per column, rows searched only on failure."""
    for col in columns:
        if col not in table.column_names or not pa.types.is_string(table.schema.field(col).type):
            continue
        try:
            table.column(col).validate(full=True)
            continue
        except pa.ArrowInvalid:
            pass
        raw = table.column(col).cast(pa.binary()).to_pylist()
        row = next((i for i, v in enumerate(raw) if v is not None and not _utf8(v)), None)
        where = f" (data row {row + 1}: {raw[row][:40]!r})" if row is not None else ""
        raise SourceError(
            f"source file {uri!r}: column {col!r} holds text that is not UTF-8{where}; "
            f"raycache reads {fmt.upper()} as UTF-8: re-encode the file (e.g. iconv -f latin1 -t "
            f"utf-8 in.{fmt} > out.{fmt}) and point source.path at the result")


def _utf8(value: bytes) -> bool:
    try:
        value.decode()
    except UnicodeDecodeError:
        return False
    return True


def check_types(schemas: list[pa.Schema], files: list[SourceFile], columns: list[str],
                inferred: bool = False) -> list[str]:
    """Columns whose type differs between two files (a column of nulls only goes with any; the
    shards keep each file's types, and one cache holds one type per column): one problem per
    column, naming the first two files that differ. `inferred`: the types were inferred from
    each file's first rows (CSV, JSONL), so an integer and a float type pass (a float further
    down makes both float; the key scan names a type that stays apart)."""
    out = []
    for col in columns:
        seen: tuple[str, pa.DataType] | None = None
        for f, schema in zip(files, schemas, strict=True):
            if col not in schema.names or pa.types.is_null(schema.field(col).type):
                continue
            t = schema.field(col).type
            if seen is None:
                seen = (f.uri, t)
            elif t != seen[1] and not (inferred and _number(t) and _number(seen[1])):
                out.append(
                    f"source column {col!r} is {seen[1]} in {seen[0]!r} but {t} in {f.uri!r}; "
                    f"a column needs one type in every file of a source: write {col!r} with "
                    f"one type in all of them (e.g. cast it to {seen[1]}), or fill the files "
                    "as separate sources"
                )
                break
    return out


def _number(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)

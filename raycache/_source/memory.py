"""Sources held in memory: a pandas DataFrame, a pyarrow Table, a Hugging Face `datasets`
Dataset (or one split of a DatasetDict), or a Ray Dataset. Each is staged once into the store as
Parquet under `.sources/<id>/`, so the fill reads it as files (on every node, with resume and
reuse as for files), and is fingerprinted by its content, never by where it was staged.

A Ray Dataset is lazy: it has no content hash without reading it all, so the user names its
version (source.version) and that name stands for its content."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from raycache._core.secrets import reveal
from raycache._errors import SourceError

if TYPE_CHECKING:
    from raycache._cache.store import Store
    from raycache._source.config import SourceConfig

__all__ = ["STAGED", "describe_kind", "stage", "stage_table"]

STAGED = ".sources"
"""The store folder of staged in-memory sources (a dot name: never a cache)."""
READY = "_staged"
"""Written last into a staged folder: its data is whole (names starting with _ are not data)."""


def _pandas(data: Any, split: str | None) -> pa.Table:
    return pa.Table.from_pandas(data, preserve_index=False)


def _hf(data: Any, split: str | None) -> pa.Table:
    """A Dataset's table; its ClassLabel columns as categories of their names (named labels)."""
    if getattr(data, "_indices", None) is not None:  # a shuffled/selected view: materialise
        data = data.flatten_indices()
    table = data.data.table
    for name, feature in data.features.items():
        if type(feature).__name__ == "ClassLabel":
            ids = table.column(name).combine_chunks().cast(pa.int32())
            table = table.set_column(table.schema.get_field_index(name), name,
                                     pa.DictionaryArray.from_arrays(ids, feature.names))
    return table


def _hf_split(data: Any, split: str | None) -> pa.Table:
    if split is None or split not in data:
        raise SourceError(f"source.data is a DatasetDict with splits {sorted(data)}; set "
                          "source.split to one of them")
    return _hf(data[split], None)


TABLES: dict[str, Callable[[Any, str | None], pa.Table]] = {
    "pandas.DataFrame": _pandas,
    "pyarrow.Table": lambda data, split: data,
    "datasets.Dataset": _hf,
    "datasets.DatasetDict": _hf_split,
}
"""In-memory kinds read as one Arrow table, by `module.Class` of the object's type (its base
module: pandas.core.frame.DataFrame is pandas.DataFrame)."""


def describe_kind(data: Any) -> str:
    """`module.Class` of an in-memory source, or a SourceError naming what is accepted."""
    for cls in type(data).__mro__:
        kind = f"{cls.__module__.split('.')[0]}.{cls.__name__}"
        if kind in TABLES or kind == "ray.Dataset":
            return kind
    raise SourceError(
        f"source.data is a {type(data).__module__}.{type(data).__name__}; expected a pandas "
        "DataFrame, a pyarrow Table, a Hugging Face datasets Dataset/DatasetDict or a "
        "ray.data Dataset (or give source.path for files)")


def stage(source: SourceConfig, store: Store) -> tuple[SourceConfig, dict[str, Any]]:
    """(the source as Parquet files in the store, what the fingerprint records of it)."""
    kind = describe_kind(source.data)
    if kind == "ray.Dataset":
        return _stage_ray(source, store)
    table = TABLES[kind](source.data, source.split)
    if table.num_rows == 0:
        raise SourceError(f"source.data ({kind}) has no rows; give data with rows to fill")
    return stage_table(table, kind, source, store)


def stage_table(table: pa.Table, kind: str, source: SourceConfig, store: Store
                ) -> tuple[SourceConfig, dict[str, Any]]:
    """`table` staged as Parquet in the store, named and described by its content."""
    digest = content_digest(table)
    folder = store.path(STAGED, digest[:32])
    if not store.exists(f"{folder}/{READY}"):
        with store.open_atomic(f"{folder}/part-0.parquet") as f:
            pq.write_table(table, f, row_group_size=65_536)
        store.write_atomic(f"{folder}/{READY}", b"")
    about = {"data": kind, "sha256": digest, "rows": table.num_rows}
    return _as_files(source, store, folder), about


def _stage_ray(source: SourceConfig, store: Store) -> tuple[SourceConfig, dict[str, Any]]:
    if not source.version:
        raise SourceError(
            "source.data is a ray.data Dataset, which has no stable content hash without "
            "reading it all; name this version of the data with source.version (e.g. the date "
            "or commit of its inputs), and a new name whenever the data changes")
    name = hashlib.sha256(source.version.encode()).hexdigest()[:32]
    folder = store.path(STAGED, f"ray-{name}")
    if not store.exists(f"{folder}/{READY}"):
        fs = store.pyarrow_fs()
        source.data.write_parquet(folder, filesystem=fs)
        store.write_atomic(f"{folder}/{READY}", b"")
    return _as_files(source, store, folder), {"data": "ray.Dataset", "version": source.version}


def _as_files(source: SourceConfig, store: Store, folder: str) -> SourceConfig:
    """The source as the staged Parquet files, read with the store's options."""
    return dataclasses.replace(source, path=store.url(folder), data=None, format="parquet",
                               split=None, options=reveal(store.options))


def content_digest(table: pa.Table) -> str:
    """sha256 of the table's schema and values, streamed through the hash: one chunk per
    column, so how the data was chunked in memory does not change it, and without pandas'
    metadata, which names the pandas version."""
    meta = {k: v for k, v in (table.schema.metadata or {}).items() if k != b"pandas"}
    table = table.replace_schema_metadata(meta or None).combine_chunks()
    h = _Hash()
    with pa.ipc.new_stream(pa.PythonFile(h, mode="w"), table.schema) as writer:
        writer.write_table(table)
    return h.sha.hexdigest()


class _Hash:
    """A write-only file that hashes what it is given."""

    def __init__(self) -> None:
        self.sha, self.closed = hashlib.sha256(), False

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

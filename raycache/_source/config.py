"""SourceConfig: the user's table, its key and label columns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from raycache._core.secrets import seal

__all__ = ["DUPLICATES", "FILE_FORMATS", "SOURCE_FORMATS", "SourceConfig"]

FILE_FORMATS = ("parquet", "jsonl", "csv")
"""Formats of tables in files (what predict reads too)."""
SOURCE_FORMATS = (*FILE_FORMATS, "imagefolder")
"""A fill's source formats: tables in files, or a folder of images, one subfolder per class."""
DUPLICATES = ("error", "first", "last")


@dataclass
class SourceConfig:
    path: str | list[str] | None = None
    """File, folder or glob (or a list of them), local or any fsspec URI (or give `data`)."""
    data: Any = None
    """Instead of `path`, from the SDK: a pandas DataFrame, a pyarrow Table, a Hugging Face
    datasets Dataset or DatasetDict (with `split`), or a ray.data Dataset (with `version`),
    staged once into the store as Parquet and fingerprinted by its content. As a string: a
    folder written by datasets' save_to_disk, or a Hugging Face hub dataset id (org/name,
    with `split`) from the local Hugging Face cache."""
    split: str | None = None
    """The split of a DatasetDict given as `data`."""
    format: str | None = None
    """parquet, jsonl or csv; inferred from the file suffix when left out. Or imagefolder: `path`
    is a folder of images with one subfolder per class; its rows are keyed by each file's path
    relative to the folder (in the `key` column), with an `image` column (the file's URI, size
    and version, for an hf-image encoder's input) and a `label` column (the subfolder's name, a
    named label)."""
    key: str = "id"
    """Column whose value identifies a row; it travels into the cache."""
    labels: list[str] = field(default_factory=list)
    """Label columns copied into the cache as they are."""
    options: dict[str, Any] = field(default_factory=dict)
    """fsspec storage options for the source (credentials as in store.options)."""
    version: str | None = None
    """A version you name for sources whose files carry no mtime or ETag, and for a ray.data
    Dataset given as `data` (it has no content hash without reading it all)."""
    duplicates: str = "error"
    """Rows that share a key: error (the fill commits nothing and lists a few), or keep the
    first or the last of them in source order (files sorted, then rows)."""

    def __post_init__(self) -> None:
        self.options = seal(self.options)

    def problems(self) -> list[str]:
        out = []
        if (self.path is None) == (self.data is None):
            out.append("source: give exactly one of path (files) and data (a DataFrame, Arrow "
                       "table, Hugging Face or Ray dataset, from the SDK)")
        if self.format not in (None, *SOURCE_FORMATS):
            out.append(f"source.format={self.format!r}: expected one of {SOURCE_FORMATS}")
        if self.format == "imagefolder" and self.data is not None:
            out.append("source.format=imagefolder reads a folder: give it as source.path, not "
                       "source.data")
        if self.duplicates not in DUPLICATES:
            out.append(f"source.duplicates={self.duplicates!r}: expected one of {DUPLICATES}")
        return out

"""An image folder laid out one class per subfolder, as a small table of (key, image, label)
built at plan time; the encoder's prepare stage reads the images themselves."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import fsspec
import pyarrow as pa

from raycache._core.secrets import reveal
from raycache._errors import SourceError
from raycache._source.listing import list_files

if TYPE_CHECKING:
    from raycache._cache.store import Store
    from raycache._source.config import SourceConfig

__all__ = ["IMAGE", "IMAGE_SUFFIXES", "LABEL", "stage", "table"]

IMAGE, LABEL = "image", "label"
"""The table's columns: each file as a struct of its URI (`path`), size and version (so reuse by
input value sees a changed file as a new input), and the name of its class (its subfolder)."""
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
"""Files taken as images (by suffix, any case); other files in the folder are left out."""


def table(source: SourceConfig) -> pa.Table:
    """One row per image under the folder: the key (its path relative to the folder), the image
    (its URI, size and mtime or ETag: the table's content digest changes when a file does) and
    the label (its first subfolder)."""
    if not isinstance(source.path, str):
        raise SourceError(f"source.path={source.path!r}: format imagefolder takes one folder, "
                          "holding one subfolder per class")
    fs, root = fsspec.core.url_to_fs(source.path, **reveal(source.options))
    if not fs.isdir(root):
        raise SourceError(f"source.path={source.path!r} is not a folder; format imagefolder "
                          "takes a folder holding one subfolder of images per class")
    prefix = (fs.unstrip_protocol(root) if "://" in source.path else root).rstrip("/") + "/"
    _, files = list_files(source)
    keys, images, loose = [], [], []
    for f in files:
        if not f.uri.lower().endswith(IMAGE_SUFFIXES):
            continue
        key = f.uri[len(prefix):] if f.uri.startswith(prefix) else f.uri
        if "/" not in key:
            loose.append(key)
            continue
        keys.append(key)
        images.append({"path": f.uri, "size": f.size, "version": f.version})
    if loose:
        raise SourceError(f"source.path={source.path!r}: images {loose[:3]} lie in the folder "
                          "itself; format imagefolder takes one subfolder per class (the "
                          "subfolder's name is the label), so move them into one")
    if not images:
        kinds = " ".join(IMAGE_SUFFIXES)
        raise SourceError(f"source.path={source.path!r} holds no images ({kinds}) in "
                          "subfolders; put each class's images in a subfolder named after it")
    kind = pa.struct([("path", pa.string()), ("size", pa.int64()), ("version", pa.string())])
    return pa.table({source.key: pa.array(keys, pa.string()), IMAGE: pa.array(images, kind),
                     LABEL: pa.array([k.split("/", 1)[0] for k in keys], pa.string())})


def stage(source: SourceConfig, store: Store) -> tuple[SourceConfig, dict[str, Any]]:
    """(the folder's table staged as Parquet in the store, what the fingerprint records of it);
    its labels default to the `label` column."""
    from raycache._source.memory import stage_table

    staged, about = stage_table(table(source), "imagefolder", source, store)
    return dataclasses.replace(staged, labels=list(source.labels) or [LABEL]), about

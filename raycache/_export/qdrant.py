"""Export to a Qdrant collection through qdrant-client (where installed): one point per row, its
id a uuid5 of the key (the same key gets the same id on every export), the key and labels in
its payload, one named vector per encoder (cosine). A collection this export created and
could not fill is removed."""

from __future__ import annotations

import uuid
from typing import Any

from raycache._cache.native import matrix
from raycache._core.extras import lacking
from raycache._errors import ConfigError, RaycacheError
from raycache._export.rows import Rows

__all__ = ["BATCH", "NAMESPACE", "check", "client_of", "point_id", "write"]

NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/raycache/raycache/keys")
"""The uuid5 namespace of point ids."""
BATCH = 512
"""Points per upsert."""


def point_id(key: object) -> str:
    """A row's point id: uuid5 of its key's text (Qdrant takes only integers and UUIDs)."""
    return str(uuid.uuid5(NAMESPACE, str(key)))


def check(to: Any, options: dict[str, Any], overwrite: bool) -> list[str]:
    """What is wrong before anything is read: no qdrant-client."""
    return lacking("qdrant_client", "format 'qdrant'")


def client_of(to: Any, options: dict[str, Any]) -> tuple[Any, bool]:
    """A client for `to` (a QdrantClient as it is; ":memory:"; an http(s) URL; else a local
    folder, qdrant-client's local mode), and whether this export made it (and closes it)."""
    from qdrant_client import QdrantClient

    if isinstance(to, QdrantClient):
        return to, False
    if to == ":memory:":
        return QdrantClient(":memory:"), True
    if to.startswith(("http://", "https://")):
        return QdrantClient(url=to, **options), True
    return QdrantClient(path=to, **options), True


def write(rows: Rows, to: Any, options: dict[str, Any], overwrite: bool,
          collection: str | None = None, **_: Any) -> dict[str, Any]:
    """Create the collection and upsert every row; where, the collection and its points."""
    from qdrant_client import models

    problems = check(to, options, overwrite)
    name = collection or rows.cache.name
    client, made = client_of(to, options)
    try:
        if client.collection_exists(name) and not overwrite:
            problems.append(f"collection {name!r} exists in {to!r}; pass overwrite=True "
                            "(--overwrite) to replace it, or name another (collection=)")
        if problems:
            raise ConfigError(problems)
        if client.collection_exists(name):
            client.delete_collection(name)
        client.create_collection(name, vectors_config={
            e: models.VectorParams(size=d, distance=models.Distance.COSINE)
            for e, d in rows.vectors.items()})
        try:
            for table in rows.tables():
                for start in range(0, table.num_rows, BATCH):
                    part = table.slice(start, BATCH)
                    client.upsert(name, wait=True, points=models.Batch(
                        ids=[point_id(k) for k in part.column(rows.key).to_pylist()],
                        vectors={e: matrix(part.column(e)).tolist() for e in rows.vectors},
                        payloads=part.select([rows.key, *rows.labels]).to_pylist()))
            count = client.count(name, exact=True).count
            if count != rows.rows:
                raise RaycacheError(f"export of {rows.label} to collection {name!r} holds "
                                    f"{count} points, its manifest says {rows.rows} rows "
                                    "(keys that are not unique?)")
        except BaseException:
            client.delete_collection(name)
            raise
    finally:
        if made:
            client.close()
    where = to if isinstance(to, str) else "a QdrantClient"
    return {"to": f"{where} collection {name}", "rows": count, "bytes": None,
            "collection": name}

"""The manifest: a cache's commit record, with a format version checked on every read."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from raycache.errors import StoreError

__all__ = ["FORMAT_VERSION", "EncoderEntry", "Manifest", "ShardEntry", "human_bytes"]

FORMAT_VERSION = 2
"""2: shards named and recorded by the source row ranges they hold."""
READABLE = (1, 2)


@dataclass(frozen=True)
class EncoderEntry:
    name: str
    kind: str
    input: str
    dim: int
    dtype: str
    weights_digest: str


@dataclass(frozen=True)
class ShardEntry:
    path: str
    """Relative to the cache folder, e.g. shards/part-<block>-<offset>.parquet."""
    rows: int
    bytes: int
    sha256: str
    source: str
    """URI of the source file of the shard's first rows."""
    ranges: list[list[Any]] = field(default_factory=list)
    """The source rows it holds: [file block id, start, stop] per run of rows (version 2)."""


@dataclass
class Manifest:
    name: str
    fingerprint: str
    inputs: dict[str, Any]
    """Everything the fingerprint was computed from."""
    encoders: list[EncoderEntry]
    key_column: str
    label_columns: list[str]
    label_types: dict[str, str]
    shards: list[ShardEntry]
    created: str
    fill_seconds: float
    format_version: int = FORMAT_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.shards)

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.shards)

    def encoder(self, name: str) -> EncoderEntry:
        for e in self.encoders:
            if e.name == name:
                return e
        raise StoreError(
            f"encoder {name!r} is not in cache {self.name}/{self.fingerprint}; "
            f"it holds {[e.name for e in self.encoders]}"
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "manifest") -> Manifest:
        version = data.get("format_version")
        if version not in READABLE:
            raise StoreError(
                f"{where} has format_version={version!r}; this raycache reads versions "
                f"{READABLE}. Install the raycache that wrote it, or fill the cache again"
            )
        try:
            return cls(
                **{
                    **data,
                    "encoders": [EncoderEntry(**e) for e in data["encoders"]],
                    "shards": [ShardEntry(**s) for s in data["shards"]],
                }
            )
        except (KeyError, TypeError) as exc:
            raise StoreError(f"{where} is malformed ({exc}); fill the cache again") from exc

    def summary(self) -> str:
        encs = ", ".join(f"{e.name}[{e.dim} {e.dtype}]" for e in self.encoders)
        return (
            f"{self.name}/{self.fingerprint[:12]}: {self.rows} rows, {len(self.shards)} shards, "
            f"{human_bytes(self.bytes)}, encoders {encs}, labels {self.label_columns}, "
            f"created {self.created}"
        )


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"

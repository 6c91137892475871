"""The manifest: a cache's commit record, with a format version checked on every read."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from raycache._cache.order import Place, place_of
from raycache._cache.records import ShardEntry, SkippedRow
from raycache._errors import CorruptCache, StoreError

__all__ = ["FORMAT_VERSION", "LABEL_PROBLEMS", "SKIPPED", "EncoderEntry", "Manifest", "ShardList",
           "human_bytes"]

SKIPPED = "skipped"
"""The key in a manifest's `extra` of the rows its fill skipped (on_bad_rows: skip), each
SkippedRow's JSON: in `extra`, so that any raycache that reads format 5 reads the manifest."""

LABEL_PROBLEMS = "label_problems"
"""The key in a manifest's `extra` of what its fill found wrong with the labels (null labels,
class ids no row holds), in words; the fill's summary says the same."""

FORMAT_VERSION = 5
"""2: shards named and recorded by the source row ranges they hold. 3: shards hold each
encoder input's sha256 per row, and encoders their identity, so later fills reuse them; the
shard list is its own object (`shards-<digest>.json`), read when needed, so the manifest (and a
fill that hits) costs the same for any number of shards. 4: embeddings and views are packed
(cache.vectors): ten times faster to decode. 5: versions share storage: a shard list entry may
name a shard in an older version's folder (`home`) and the rows of it that this version keeps
(`keep`, raycache._cache.selection)."""
READABLE = (1, 2, 3, 4, 5)


@dataclass(frozen=True)
class EncoderEntry:
    """One encoder of a cache, as its manifest records it.

    Example:
        ```python
        entry = raycache.open_cache("docs").manifest.encoder("minilm")
        print(entry.kind, entry.dim, entry.weights_digest[:12])
        ```
    """

    name: str
    """The encoder's name, which is also its embedding column's."""
    kind: str
    """Its family (an ENCODERS key: hf-text, hf-image, torch, ...)."""
    input: str
    """The source column it encodes."""
    dim: int
    """Numbers per embedding."""
    dtype: str
    """The embeddings' number type (float32, float16)."""
    weights_digest: str
    """The sha256 of its weights: a new checkpoint is a new cache."""
    identity: str = ""
    """What gives the same output for the same input (raycache._fill.reuse.encoder_identity);
    empty before format 3, whose shards cannot be reused."""
    trainable: bool = False
    """Trained with the head: not encoded by the fill, its input kept in `column` instead
    (no embeddings, no weights digest; `dim` is 0 where the fill cannot know it)."""
    column: str = ""
    """A trainable encoder's shard column (input_column); empty for a frozen one."""


class ShardList(Sequence["ShardEntry"]):
    """A manifest's shards, read from their own object on first use (format 3)."""

    def __init__(self, load: Callable[[], list[ShardEntry]]):
        self._load, self._items = load, None

    def _get(self) -> list[ShardEntry]:
        if self._items is None:
            self._items = self._load()
        return self._items

    def __getitem__(self, i: Any) -> Any:
        return self._get()[i]

    def __len__(self) -> int:
        return len(self._get())

    def __iter__(self) -> Iterator[ShardEntry]:
        return iter(self._get())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def __reduce__(self) -> tuple:
        return list, (self._get(),)  # pickled as the plain list it reads

    def __repr__(self) -> str:
        return f"ShardList({'not read yet' if self._items is None else len(self._items)})"


@dataclass
class Manifest:
    """A committed cache's record (manifest.json): what was encoded, how, and where the shards
    are. A fill writes it last; a cache without one is not committed.

    Example:
        ```python
        m = raycache.open_cache("docs").manifest
        print(m.summary())
        m.rows, m.encoder("minilm").dim, m.label_columns
        ```
    """

    name: str
    """The cache's name (the fill config's `name`)."""
    fingerprint: str
    """The sha256 of `inputs`, hex, its first 24 characters: the version's folder name."""
    inputs: dict[str, Any]
    """Everything the fingerprint was computed from."""
    encoders: list[EncoderEntry]
    """The encoders, in the fill config's order."""
    key_column: str
    """The source column that names each row (source.key)."""
    label_columns: list[str]
    """The label columns copied from the source (source.labels)."""
    label_types: dict[str, str]
    """Each label column's Arrow type, as text (e.g. "int64", "string")."""
    shards: Sequence[ShardEntry]
    """Every shard, in order: a list, or (read from a store) a ShardList read on first use."""
    created: str
    """When the fill committed, ISO 8601 in UTC (milliseconds)."""
    fill_seconds: float
    """The fill's wall time, in seconds."""
    format_version: int = FORMAT_VERSION
    """The layout version the cache was written in (FORMAT_VERSION; older ones are read)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Records beyond the format: each encoder's fill config, the views, the skipped rows."""
    totals: dict[str, int] = field(default_factory=dict)
    """rows, bytes and shards, so that they need no read of the shard list (format 3)."""
    shard_list: dict[str, Any] = field(default_factory=dict)
    """path, bytes and sha256 of the shard list object (format 3; empty: shards inline)."""
    label_stats: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per integer label column: nulls, min, max, and counts per value (for values 0..max,
    where max < 1,000,000): training's class counts without reading a shard (format 3)."""

    @property
    def rows(self) -> int:
        """The cache's rows (from `totals`; summed over the shard list before format 3)."""
        return self.totals["rows"] if self.totals else sum(s.rows for s in self.shards)

    @property
    def bytes(self) -> int:
        """The shards' bytes in the store."""
        return self.totals["bytes"] if self.totals else sum(s.bytes for s in self.shards)

    @property
    def shard_count(self) -> int:
        """The number of shards."""
        return self.totals["shards"] if self.totals else len(self.shards)

    @property
    def place(self) -> Place:
        """Its place in its name's history (raycache._cache.order): fixed at its first commit,
        never changed by a repair or compaction; `open_cache` by name, training by name, `ls`
        and gc's policies order versions by it."""
        return place_of(self.fingerprint, self.created, self.extra)

    @property
    def skipped(self) -> list[SkippedRow]:
        """The source rows the fill left out (on_bad_rows: skip), with why; the next fill of
        this cache retries them."""
        return [SkippedRow.from_json(s) for s in self.extra.get(SKIPPED, ())]

    @property
    def label_problems(self) -> list[str]:
        """What the fill found wrong with the labels (null labels, class ids no row holds), in
        words; training refuses null labels."""
        return list(self.extra.get(LABEL_PROBLEMS, ()))

    def encoder(self, name: str) -> EncoderEntry:
        """One encoder's entry, by name.

        Args:
            name: The encoder's name.

        Returns:
            Its entry: kind, input, dim, dtype, weights digest.

        Raises:
            StoreError: The cache has no encoder of that name (the message lists those it
                has).

        Example:
            ```python
            dim = raycache.open_cache("docs").manifest.encoder("minilm").dim
            ```
        """
        for e in self.encoders:
            if e.name == name:
                return e
        raise StoreError(
            f"encoder {name!r} is not in cache {self.name}/{self.fingerprint}; "
            f"it holds {[e.name for e in self.encoders]}"
        )

    def head(self) -> dict[str, Any]:
        """Everything but the shards: what manifest.json holds from format 3.

        Returns:
            The manifest's fields as JSON-ready values, `shards` left out.

        Example:
            ```python
            head = raycache.open_cache("docs").manifest.head()
            ```
        """
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name != "shards"}
        out["encoders"] = [dataclasses.asdict(e) for e in self.encoders]
        return out

    def to_dict(self) -> dict[str, Any]:
        """The whole manifest, shards included (they are read if they were not).

        Returns:
            The manifest as JSON-ready values, with one entry per shard under `shards`.

        Raises:
            CorruptCache: The shard list cannot be read or does not match its record.
            StoreUnavailable: The store kept failing after its client's retries.

        Example:
            ```python
            data = raycache.open_cache("docs").manifest.to_dict()
            same = raycache.Manifest.from_dict(data)
            ```
        """
        return {**self.head(), "shards": [s.to_json() for s in self.shards]}

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "manifest",
                  shards: Callable[[dict[str, Any]], list[Any]] | None = None
                  ) -> Manifest:
        """A manifest from its JSON.

        Args:
            data: The parsed manifest.json (or `to_dict()`'s output).
            where: What to call the manifest in an error message (its URI).
            shards: Reads the shard list object a format 3 manifest names, given its entry;
                called when the shards are first used. Not needed when `data` has `shards`.

        Returns:
            The manifest.

        Raises:
            CorruptCache: `data` is not a manifest, or a field is missing or malformed.
            StoreError: Its format_version is one this raycache does not read.

        Example:
            ```python
            import json
            m = raycache.Manifest.from_dict(json.load(open("manifest-with-shards.json")))
            ```
        """
        if not isinstance(data, dict):
            raise CorruptCache(f"{where} holds a JSON {type(data).__name__}, not a manifest",
                               where)
        version = data.get("format_version")
        if version not in READABLE:
            raise StoreError(
                f"{where} has format_version={version!r}; this raycache reads versions "
                f"{READABLE}. Install the raycache that wrote it, or fill the cache again"
            )
        try:
            if "shards" in data:
                entries: Sequence[ShardEntry] = [ShardEntry.from_json(s)
                                                   for s in data["shards"]]
            elif shards is None:
                raise KeyError("shards (no reader given for the shard list)")
            else:
                info = data["shard_list"]
                entries = ShardList(lambda: [s if isinstance(s, ShardEntry) else
                                             ShardEntry.from_json(s) for s in shards(info)])
            return cls(**{**data, "encoders": [EncoderEntry(**e) for e in data["encoders"]],
                          "shards": entries})
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptCache(f"{where} is malformed ({type(exc).__name__}: {exc}); fill the "
                               "cache again", where) from exc

    def summary(self) -> str:
        """The manifest in one line: rows, shards, size, encoders, labels, when.

        Returns:
            The line (the fingerprint cut to 12 characters).

        Example:
            ```python
            print(raycache.open_cache("docs").manifest.summary())
            ```
        """
        encs = ", ".join(f"{e.name}[trainable, input in {e.column}]" if e.trainable else
                         f"{e.name}[{e.dim} {e.dtype}]" for e in self.encoders)
        return (
            f"{self.name}/{self.fingerprint[:12]}: {self.rows} rows, {self.shard_count} shards, "
            f"{human_bytes(self.bytes)}, encoders {encs}, labels {self.label_columns}, "
            f"created {self.created}"
            + (f", {n} row(s) skipped" if (n := len(self.extra.get(SKIPPED, ()))) else "")
        )


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"

"""What a fill, repair or compaction did: the committed cache, the rows it encoded, reused,
resumed, shared and compacted, and where its time went."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from raycache._cache.committed import Cache
from raycache._cache.manifest import human_bytes

__all__ = ["FillResult"]


@dataclass
class FillResult:
    """What a fill (or a repair) did: the committed cache, hit or miss, and how long it took.

    Example:
        ```python
        print(raycache.fill("fill.yaml").summary())
        ```
    """
    cache: Cache
    """The committed cache."""
    hit: bool
    """It was committed already: nothing was read or encoded."""
    seconds: float
    """Wall time of the fill call, start-up included."""
    encoded_rows: int
    """Rows that at least one encoder encoded."""
    resumed_rows: int = 0
    """Rows an interrupted fill had already encoded, kept and not encoded again."""
    reused_rows: int = 0
    """Rows whose every embedding came from caches in the store (same encoder, same input)."""
    encoded_by: dict[str, int] = dataclasses.field(default_factory=dict)
    """Rows each encoder encoded (the rest of its rows it reused or resumed)."""
    first_shard_seconds: float = 0.0
    """From the start of the fill to its first shard written (start-up, its encoding)."""
    encode_seconds: float = 0.0
    """From the first encoder call to the last shard written."""
    pool: str = ""
    """The encoder pool it ran, in words."""
    startup_seconds: float = 0.0
    """To the first encoder call: reading, starting Ray and the actors, loading the models."""
    repair: bool = False
    """A repair (raycache._upkeep.repair): the shards it re-encoded, into a committed cache."""
    shared_rows: int = 0
    """Rows shared with an older version (`base`), in its shard files: not read nor written."""
    base: str = ""
    """The fingerprint of the version it shares rows with (empty: none)."""
    written_bytes: int = 0
    """Bytes of the shards this call wrote."""
    compacted_rows: int = 0
    """Rows of sparse shared shards copied into new shards of this version (compaction)."""
    retried: int = 0
    """Rows an earlier fill of this cache skipped (on_bad_rows: skip), tried again."""
    compaction: bool = False
    """A compaction (raycache._upkeep.compact): sparse shared shards' kept rows copied into
    the version's own folder, nothing encoded."""

    @property
    def rows_per_second(self) -> float:
        """Rows encoded per second of wall time, start-up included."""
        return self.encoded_rows / self.seconds if self.seconds else 0.0

    @property
    def encode_rows_per_second(self) -> float:
        """Rows encoded per second once the encoders were running."""
        return self.encoded_rows / self.encode_seconds if self.encode_seconds else 0.0

    def summary(self) -> str:
        """What this call did, in one line: its timings add up to its wall time.

        Returns:
            The line (rows encoded, reused, resumed, shared; shards, bytes, labels, timings).
        """
        m = self.cache.manifest
        verb = "compact" if self.compaction else "repair" if self.repair else "fill"
        head = f"{verb} {m.name}/{m.fingerprint[:12]}: "
        if self.hit and self.compaction:
            return head + f"no shared shard to compact, {m.rows} rows in {m.shard_count} shards"
        if self.hit and self.repair:
            return head + f"every shard is good, {m.rows} rows in {m.shard_count} shards; " \
                          "nothing to repair"
        if self.hit:
            return head + f"hit, {m.rows} rows in {m.shard_count} shards, encoded nothing"
        resumed = f", {self.resumed_rows} resumed" if self.resumed_rows else ""
        shared = (f", {self.shared_rows} shared with version {self.base[:12]}"
                  if self.base else "")
        shared += f", {self.compacted_rows} compacted" if self.compacted_rows else ""
        what = (f"{self.compacted_rows} kept rows of sparse or small shared shards copied into "
                f"its own folder (nothing encoded), {m.rows} rows, " if self.compaction else
                f"re-encoded the bad shards, {m.rows} rows ({self.encoded_rows} encoded"
                f"{self._by()}, {self.resumed_rows} kept from good shards), " if self.repair else
                f"miss, {m.rows} rows ({self.encoded_rows} encoded{self._by()}, "
                f"{self.reused_rows} reused{resumed}{shared}), ")
        wrote = (f" ({human_bytes(self.written_bytes)} written)"
                 if self.base or self.compacted_rows else "")
        if self.retried:
            wrote += f"; retried {self.retried} skipped row(s)"
        wrote += "".join(f"; LABELS: {p}" for p in m.label_problems)
        if skipped := len(m.skipped):
            wrote += (f"; SKIPPED {skipped} row(s) it could not cache (on_bad_rows: skip; "
                      "`raycache inspect` lists them, the next fill retries them)")
        return head + (f"{what}{m.shard_count} shards, {human_bytes(m.bytes)}{wrote}, "
                       f"{self._timings()}")

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready values (`--json`): the version, its URI and counts, and
        every field but the Cache (never its store's options or credentials).

        Returns:
            A dict of plain values.
        """
        m = self.cache.manifest
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name != "cache"}
        return {"cache": m.name, "fingerprint": m.fingerprint, "uri": self.cache.uri,
                "rows": m.rows, "shards": m.shard_count, "bytes": m.bytes,
                "skipped": len(m.skipped), "label_problems": list(m.label_problems), **out,
                "encoded_by": dict(self.encoded_by), "rows_per_second": self.rows_per_second,
                "encode_rows_per_second": self.encode_rows_per_second}

    def _timings(self) -> str:
        """The call's wall time split so that it adds up: start-up, encoding, the rest."""
        if not self.encoded_rows:  # every row reused or resumed: no encoder ran
            return f"{self.seconds:.1f} s, nothing encoded (every row reused or resumed)"
        startup = min(max(self.startup_seconds, 0.0), self.seconds)
        encode = min(self.encode_seconds, self.seconds - startup)
        rest = max(self.seconds - startup - encode, 0.0)
        return (f"{self.seconds:.1f} s = {startup:.1f} s start-up (to the first encoder call) "
                f"+ {encode:.1f} s encoding and writing shards "
                f"({self.encoded_rows / encode if encode else 0.0:.1f} rows/s) "
                f"+ {rest:.1f} s checking and committing")

    def _by(self) -> str:
        by = self.encoded_by
        return f" [{', '.join(f'{k} {v}' for k, v in by.items())}]" if len(by) > 1 else ""

    def __repr__(self) -> str:
        return f"FillResult({self.summary()})"

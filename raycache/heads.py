"""Trainable heads on cached embeddings: a dict registry of builders, and how a head is saved.

A head is rebuilt from its `HeadSpec` alone (no Ray, no store): the spec names the family, its
shape, and the frozen encoders (configs and weights digests) whose embeddings it reads.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from raycache.errors import ConfigError

if TYPE_CHECKING:
    from torch import nn

__all__ = [
    "HEAD_CONFIG",
    "HEAD_FORMAT_VERSION",
    "HEAD_WEIGHTS",
    "REGISTRY",
    "HeadSpec",
    "build_head",
    "resolve",
]

HEAD_WEIGHTS = "head.pt"
"""The head's state_dict (torch.save), inside a checkpoint folder."""
HEAD_CONFIG = "head.json"
"""The HeadSpec, metrics and history (JSON), inside a checkpoint folder."""
HEAD_FORMAT_VERSION = 1


def linear(in_dim: int, out_dim: int, hidden: list[int], dropout: float) -> nn.Module:
    """A linear probe: one affine layer (dropout on its input when asked)."""
    from torch import nn

    return nn.Sequential(nn.Dropout(dropout), nn.Linear(in_dim, out_dim))


def mlp(in_dim: int, out_dim: int, hidden: list[int], dropout: float) -> nn.Module:
    """Hidden layers of Linear, GELU and dropout, then a linear output."""
    from torch import nn

    layers: list[nn.Module] = []
    width = in_dim
    for h in hidden:
        layers += [nn.Linear(width, h), nn.GELU(), nn.Dropout(dropout)]
        width = h
    layers.append(nn.Linear(width, out_dim))
    return nn.Sequential(*layers)


Builder = Callable[[int, int, list[int], float], "nn.Module"]

REGISTRY: dict[str, Builder] = {
    "linear": linear,
    "mlp": mlp,
}


def resolve(name: str) -> Builder:
    """A registered head family, or "package.module:function" with the same signature."""
    if name in REGISTRY:
        return REGISTRY[name]
    module, sep, attr = name.partition(":")
    if not sep:
        raise ConfigError([f"head={name!r}: unknown; expected one of {sorted(REGISTRY)} or "
                           "'package.module:function'"])
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError([f"head={name!r}: cannot import it ({exc}); check the module is on "
                           "the workers' PYTHONPATH"]) from exc


@dataclass(frozen=True)
class HeadSpec:
    """Everything needed to rebuild a trained head and the encoders that feed it."""

    head: str
    """Head family (a REGISTRY key or "module:function")."""
    in_dim: int
    num_classes: int
    hidden: tuple[int, ...]
    dropout: float
    encoders: tuple[str, ...]
    """Embedding columns, concatenated in this order."""
    label: str
    cache: str
    fingerprint: str
    encoder_configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each encoder's fill config (kind, path or factory, ...), from the cache's manifest."""
    weights_digests: dict[str, str] = field(default_factory=dict)
    """Each encoder's weights digest, from the manifest: predict checks the live encoder's."""
    format_version: int = HEAD_FORMAT_VERSION

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["hidden"], d["encoders"] = list(self.hidden), list(self.encoders)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = HEAD_CONFIG) -> HeadSpec:
        version = data.get("format_version")
        if version != HEAD_FORMAT_VERSION:
            raise ConfigError([f"{where}: format_version={version!r}; this raycache reads "
                               f"{HEAD_FORMAT_VERSION}. Load it with the raycache that wrote it"])
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in data.items() if k in names}
        kw["hidden"], kw["encoders"] = tuple(kw["hidden"]), tuple(kw["encoders"])
        return cls(**kw)


def build_head(spec: HeadSpec) -> nn.Module:
    """A fresh (untrained) head of the spec's family and shape."""
    return resolve(spec.head)(spec.in_dim, spec.num_classes, list(spec.hidden), spec.dropout)

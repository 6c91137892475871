"""Trainable heads on cached embeddings: a dict registry of builders, and how a head is saved.

A head is rebuilt from its `HeadSpec` alone (no Ray, no store): the spec names the family, its
shape, and the frozen encoders (configs and weights digests) whose embeddings it reads. Every
builder takes (in_dim, out_dim, hidden, dropout) and works on any leading batch shape.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from raycache._errors import ConfigError

if TYPE_CHECKING:
    from torch import nn

    from raycache._core.trust import Trust

__all__ = [
    "HEAD_CONFIG",
    "HEAD_FORMAT_VERSION",
    "HEAD_WEIGHTS",
    "HIDDEN",
    "LEGACY_WEIGHTS",
    "READABLE_VERSIONS",
    "HEADS",
    "STANDARDIZED",
    "HeadSpec",
    "build_head",
    "check_family",
    "gated",
    "linear",
    "mlp",
    "resolve",
    "skip",
    "stacked",
    "standardizes",
    "widening",
]

HEAD_WEIGHTS = "head.safetensors"
"""The head's state_dict (safetensors), inside a checkpoint folder."""
LEGACY_WEIGHTS = "head.pt"
"""The head's state_dict as a torch pickle: what raycache wrote before 0.3 (still read)."""
HEAD_CONFIG = "head.json"
"""The HeadSpec, metrics and history (JSON), inside a checkpoint folder."""
HEAD_FORMAT_VERSION = 2
"""2 added objective, out_dim and normalize (a version 1 head.json reads as a classifier)."""
READABLE_VERSIONS = (1, 2)
WIDENING = 4
"""widening: the hidden layer is this many times the input width."""
HIDDEN = [256]
"""The hidden widths of a head with layers (mlp, stacked, skip) where a run gives none (a
TrainConfig's hidden: auto, but for an mlp classifier trained alone: _train.defaults.WIDTHS)."""


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


def stacked(in_dim: int, out_dim: int, hidden: list[int], dropout: float) -> nn.Module:
    """Stacked projections: for each hidden width Linear, LayerNorm, GELU and dropout; then a
    linear output. The LayerNorms keep deep stacks trainable at high learning rates."""
    from torch import nn

    layers: list[nn.Module] = []
    width = in_dim
    for h in hidden:
        layers += [nn.Linear(width, h), nn.LayerNorm(h), nn.GELU(), nn.Dropout(dropout)]
        width = h
    layers.append(nn.Linear(width, out_dim))
    return nn.Sequential(*layers)


def widening(in_dim: int, out_dim: int, hidden: list[int], dropout: float) -> nn.Module:
    """One hidden layer WIDENING times wider than the input (hidden is ignored), then out."""
    return mlp(in_dim, out_dim, [in_dim * WIDENING], dropout)


def gated(in_dim: int, out_dim: int, hidden: list[int], dropout: float) -> nn.Module:
    """A gated linear unit: (W x) * sigmoid(V x), each output channel gated by the input."""
    from raycache._heads.modules import Gated

    return Gated(in_dim, out_dim, dropout)


def skip(in_dim: int, out_dim: int, hidden: list[int], dropout: float) -> nn.Module:
    """A skip connection: x (or a linear map of it when the widths differ) plus a gated MLP of
    x, the gate starting half open: the head starts near the input's own geometry."""
    from raycache._heads.modules import Skip

    return Skip(in_dim, out_dim, mlp(in_dim, out_dim, hidden, dropout))


Builder = Callable[[int, int, list[int], float], "nn.Module"]

HEADS: dict[str, Builder] = {
    "linear": linear,
    "mlp": mlp,
    "stacked": stacked,
    "widening": widening,
    "gated": gated,
    "skip": skip,
}


STANDARDIZED = frozenset({"mlp"})
"""Head families that standardise their inputs with their training rows' mean and standard
deviation, as the solved linear head does (HeadSpec.standardize)."""


def standardizes(family: str, trainable: bool = False) -> bool:
    """Whether a new head of `family` standardises its inputs: a family of STANDARDIZED, on
    frozen features only (a trainable encoder's outputs move as it trains)."""
    return family in STANDARDIZED and not trainable


def resolve(name: str) -> Builder:
    """A registered head family, or "package.module:function" with the same signature."""
    if name in HEADS:
        return HEADS[name]
    module, sep, attr = name.partition(":")
    if not sep:
        raise ConfigError([f"head={name!r}: unknown; expected one of {sorted(HEADS)} or "
                           "'package.module:function'"])
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError([f"head={name!r}: cannot import it ({exc}); check the module is on "
                           "the workers' PYTHONPATH"]) from exc


@dataclass(frozen=True)
class HeadSpec:
    """Everything needed to rebuild a trained head and the encoders that feed it.

    Training writes it into head.json; `load_head` rebuilds the head from it alone.

    Example:
        ```python
        spec = raycache.load_head(run.checkpoint).spec
        spec.head, spec.encoders, spec.width
        ```
    """

    head: str
    """Head family (a HEADS key or "module:function")."""
    in_dim: int
    """Width of its input: the encoders' output widths added up."""
    num_classes: int
    """Classes of a classifier; groups of a similarity head (0 where there are none)."""
    hidden: tuple[int, ...]
    """Hidden layer widths (mlp, stacked, skip)."""
    dropout: float
    """Dropout rate in training."""
    encoders: tuple[str, ...]
    """Embedding columns, concatenated in this order."""
    label: str
    """The label column it was trained on (empty for an objective that reads none: pairs)."""
    cache: str
    """The name of the cache it was trained on."""
    fingerprint: str
    """The fingerprint of that cache's version."""
    encoder_configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each encoder's fill config (kind, path or factory, ...), from the cache's manifest."""
    weights_digests: dict[str, str] = field(default_factory=dict)
    """Each encoder's weights digest, from the manifest: predict checks the live encoder's."""
    objective: str = "classification"
    """The objective family the head was trained for (raycache._train.objectives.OBJECTIVES)."""
    out_dim: int = 0
    """Width of the head's output: an embedding dim; 0 means num_classes (a classifier)."""
    normalize: bool = False
    """L2-normalise the head's output (similarity heads on cosine or dot distances)."""
    trainable: tuple[str, ...] = ()
    """The encoders (of `encoders`) trained with the head, run live on their cached input;
    their outputs follow the cached frozen columns, in `encoders` order (raycache._heads.joint)."""
    class_names: tuple[str, ...] = ()
    """A classifier on a named label (strings): class i's name; empty for integer labels,
    whose class i is the value i."""
    standardize: bool = False
    """The head standardises its inputs with its training rows' mean and standard deviation,
    held as buffers in its weights (families of STANDARDIZED; heads saved before it read as
    false and predict as they did)."""
    linear_start: bool = False
    """Training started the head as the solved linear head (raycache._heads.linear_start: an
    mlp classifier whose hidden widths are at least twice its classes), the solve its first
    epoch; heads saved before it read as false."""
    format_version: int = HEAD_FORMAT_VERSION
    """The head.json layout version (HEAD_FORMAT_VERSION; older ones are read)."""

    @property
    def width(self) -> int:
        """The head's output width: out_dim, or num_classes for a classifier."""
        return self.out_dim or self.num_classes

    @property
    def frozen(self) -> tuple[str, ...]:
        """The encoders whose embeddings are read from the cache."""
        return tuple(e for e in self.encoders if e not in self.trainable)

    def to_dict(self) -> dict[str, Any]:
        """The spec as JSON-ready values: what head.json holds under "head".

        Returns:
            The fields, tuples as lists (`trainable`, `class_names`, `standardize` and
            `linear_start` left out when empty or false).

        Example:
            ```python
            same = raycache.HeadSpec.from_dict(spec.to_dict())
            ```
        """
        d = dataclasses.asdict(self)
        d["hidden"], d["encoders"] = list(self.hidden), list(self.encoders)
        d["trainable"] = list(self.trainable)
        if not self.trainable:  # so heads and run digests without one read as before
            del d["trainable"]
        d["class_names"] = list(self.class_names)
        if not self.class_names:
            del d["class_names"]
        if not self.standardize:  # so heads and run digests without it read as before
            del d["standardize"]
        if not self.linear_start:
            del d["linear_start"]
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = HEAD_CONFIG) -> HeadSpec:
        """A spec from its JSON (head.json's "head"), any readable format version.

        Args:
            data: The spec's fields, as `to_dict` writes them; unknown keys are ignored.
            where: What to call the file in an error message.

        Returns:
            The spec, at the current format version.

        Raises:
            ConfigError: Its format_version is one this raycache does not read.

        Example:
            ```python
            spec = raycache.HeadSpec.from_dict(json.load(open("head.json"))["head"])
            ```
        """
        version = data.get("format_version")
        if version not in READABLE_VERSIONS:
            raise ConfigError([f"{where}: format_version={version!r}; this raycache reads "
                               f"{list(READABLE_VERSIONS)}. Load it with the raycache that "
                               "wrote it"])
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in data.items() if k in names}
        kw["hidden"], kw["encoders"] = tuple(kw["hidden"]), tuple(kw["encoders"])
        kw["trainable"] = tuple(kw.get("trainable", ()))
        kw["class_names"] = tuple(kw.get("class_names", ()))
        kw["format_version"] = HEAD_FORMAT_VERSION  # older versions lack fields, not meaning
        return cls(**kw)


def build_head(spec: HeadSpec) -> nn.Module:
    """A fresh (untrained) head of the spec's family and shape (its inputs standardised, its
    outputs normalised, when asked)."""
    module = resolve(spec.head)(spec.in_dim, spec.width, list(spec.hidden), spec.dropout)
    if spec.standardize:
        from raycache._heads.modules import Standardized

        module = Standardized(module, spec.in_dim)
    if spec.normalize:
        from raycache._heads.modules import Normalized

        return Normalized(module)
    return module


def check_family(spec: HeadSpec, trust: Trust, where: str) -> None:
    """Refuse a spec read from a file (`where`: its head.json) whose head family is code (not
    a HEADS key) that `trust` does not allow, before anything is imported.

    Raises:
        UntrustedCode: The family is a "module:function" not trusted.
    """
    if spec.head not in HEADS:
        trust.check(f"{where}: head.head", str(spec.head),
                    f"register it in this process: raycache._heads.HEADS[{spec.head!r}] = "
                    "its builder")

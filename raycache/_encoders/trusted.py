"""Encoders named by a file (a head's head.json, a cache's manifest): the code building one
would run checked against the caller's trust before anything is imported."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from raycache._core.trust import Trust
from raycache._encoders import ENCODERS
from raycache._encoders.config import EncoderConfig

__all__ = ["check_encoders"]

REGISTER = ("save the encoder as a model folder instead (kind hf-text or hf-image), which "
            "loads as data")


def check_encoders(configs: Mapping[str, EncoderConfig | Mapping[str, Any]], trust: Trust,
                   where: str) -> None:
    """Refuse a config of `configs` (by encoder name) whose building runs code `trust` does
    not allow; `where` names the file and the field holding them ("manifest.json:
    encoder_configs"). A kind not in ENCODERS builds nothing: its own error comes later.

    Raises:
        UntrustedCode: An encoder's code (a torch factory) is not trusted.
    """
    if not isinstance(configs, Mapping):
        return  # not configs: nothing is built from them, and their reader fails on them
    for name, given in configs.items():
        if not isinstance(given, EncoderConfig | Mapping):
            continue  # not a config: it builds nothing, and fails as unreadable where built
        kind = given.kind if isinstance(given, EncoderConfig) else given.get("kind")
        family = ENCODERS.get(kind) if isinstance(kind, str) else None
        if family is None or family.code is None:
            continue
        cfg = given if isinstance(given, EncoderConfig) else _config(given)
        ref = family.code(cfg)
        if ref:
            trust.check(f"{where}.{name}.factory", str(ref), REGISTER)


def _config(data: Mapping[str, Any]) -> EncoderConfig:
    """The config's factory and kind alone: enough to name its code (other fields may be of a
    newer raycache, and are judged where the encoder is built)."""
    return EncoderConfig(name=str(data.get("name", "")), kind=str(data.get("kind")),
                         input=str(data.get("input", "")), factory=data.get("factory"))

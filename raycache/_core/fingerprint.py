"""Cache key: sha256 of a canonical JSON description; anything unstable is an error."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from raycache._errors import FingerprintError

LENGTH = 24


def canonical(value: Any, where: str = "inputs") -> Any:
    """Check that value is plain JSON data (so it describes the same way every time)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise FingerprintError(f"{where}={value!r}: not a finite number; give a real value")
        return value
    if isinstance(value, list | tuple):
        return [canonical(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise FingerprintError(f"{where}: key {k!r} is not a string; use string keys")
            out[k] = canonical(v, f"{where}.{k}")
        return out
    raise FingerprintError(
        f"{where}={value!r} ({type(value).__name__}) cannot be described stably for the cache "
        "key; pass plain data (strings, numbers, lists, mappings) or name a version for it"
    )


def fingerprint(inputs: dict[str, Any]) -> str:
    """The hex digest of the canonical form of inputs."""
    text = json.dumps(canonical(inputs), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:LENGTH]

"""What every encoder family provides, and the freezing every one of them goes through."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np
import pyarrow as pa
import torch

from raycache.config import EncoderConfig


class Encoder(Protocol):
    """A loaded, frozen encoder: one column of inputs in, an (n, dim) float32 array out."""

    def encode(self, values: pa.Array) -> np.ndarray: ...

    def weights_digest(self) -> str:
        """Digest of the weights actually loaded; must equal the described one."""
        ...


class Family(NamedTuple):
    """An encoder family: `describe` is cheap and runs on the driver; `load` runs in actors."""

    describe: Callable[[EncoderConfig], dict[str, Any]]
    """Stable description for the fingerprint: settings plus a `weights_digest`."""
    load: Callable[[EncoderConfig, str], Encoder]
    """Build the frozen encoder on a device ("cpu", "cuda")."""


def freeze(module: torch.nn.Module) -> torch.nn.Module:
    """Eval mode, no gradients: the only state in which an encoder's output is cacheable."""
    module.eval()
    for p in module.parameters():
        p.requires_grad_(False)
    return module


def digest_files(paths: Iterable[Path], root: Path) -> str:
    """sha256 over (relative name, content) of each file, in sorted order."""
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(str(p.relative_to(root)).encode() + b"\0")
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()

"""What every encoder family provides, and what all of them share: freezing, precision, batching."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np
import pyarrow as pa

from raycache._encoders.batching import Batching
from raycache._encoders.config import EncoderConfig

if TYPE_CHECKING:
    import torch

__all__ = ["COMPUTE", "Batching", "Encoder", "Family", "autocast", "autocast_for", "compute_mode",
           "described_compute", "digest_files", "forward_stored", "freeze", "in_compute_dtype",
           "running", "to_device"]


class Encoder(Protocol):
    """A loaded, frozen encoder: a column of inputs in, an (n, dim) float32 array out."""

    def prepare(self, values: pa.Array) -> pa.Array:
        """The CPU work before the forward pass (tokenising, decoding); the fill runs it in its
        own Ray Data stage, so a GPU actor receives ready inputs."""
        ...

    def forward(self, prepared: pa.Array) -> np.ndarray:
        """Prepared inputs to embeddings, rows in input order."""
        ...

    def encode(self, values: pa.Array) -> np.ndarray:
        """prepare then forward: raw inputs to embeddings."""
        ...

    def weights_digest(self) -> str:
        """Digest of the weights actually loaded; must equal the described one."""
        ...


class Family(NamedTuple):
    """An encoder family: `describe` is cheap and runs on the driver; `prepare` builds the CPU
    stage's function (light: no model weights); `load` builds the frozen model in actors;
    `live` and `rows`, where the family has them, train it (raycache._heads.joint)."""

    describe: Callable[[EncoderConfig], dict[str, Any]]
    """Stable description for the fingerprint: settings plus a `weights_digest`."""
    load: Callable[..., Encoder]
    """load(cfg, device, batching=Batching()) -> Encoder on "cpu" or "cuda"."""
    prepare: Callable[[EncoderConfig], Callable[[pa.Array], pa.Array]]
    """prepare(cfg) -> values -> model-ready inputs."""
    live: Callable[[EncoderConfig], torch.nn.Module] | None = None
    """live(cfg) -> the encoder as a trainable module: a tensor of `rows` in, (n, dim) out
    (None: the family cannot be trained)."""
    rows: Callable[[EncoderConfig, pa.Array], np.ndarray] | None = None
    """rows(cfg, prepared) -> what the cache stored for a trainable encoder (its prepared inputs)
    as one array of rows, the tensor its `live` module takes."""
    input_bytes: Callable[[EncoderConfig], int] | None = None
    """input_bytes(cfg) -> bytes of one row's prepared input, for a family whose inputs are
    large (images): the fill cuts its blocks to hold few of them (None: small, as text)."""
    code: Callable[[EncoderConfig], str | None] | None = None
    """code(cfg) -> the code ("module:function") that building the config imports and runs
    (torch: its factory), which a config read from a file may name only where the caller
    trusts it (raycache._encoders.trusted); None: the family builds from data alone."""


def forward_stored(encoder: Encoder, prepared: pa.Array, dtype: str) -> np.ndarray:
    """An encoder's outputs for storage as `dtype`: cast on the device by an encoder that can
    (`casts_on_device`: half the bytes copied back), else as it gives them, for the caller's
    cast."""
    if getattr(encoder, "casts_on_device", False):
        return encoder.forward(prepared, dtype=dtype)
    return encoder.forward(prepared)


def freeze(module: torch.nn.Module) -> torch.nn.Module:
    """Eval mode, no gradients: the only state in which an encoder's output is cacheable."""
    module.eval()
    for p in module.parameters():
        p.requires_grad_(False)
    return module


def autocast(device: str, precision: str) -> contextlib.AbstractContextManager:
    """Mixed-precision inference at `precision` (float32 runs as is)."""
    import torch

    if precision == "float32":
        return contextlib.nullcontext()
    kind = "cuda" if device.startswith("cuda") else "cpu"
    return torch.autocast(device_type=kind, dtype=getattr(torch, precision))


def compute_mode(device: str, precision: str) -> str:
    """How a model runs at `precision` on `device`: "float32"; on a GPU "cast-<precision>"
    (its weights cast to the compute dtype, run without autocast: autocast over cast weights
    would still run layer norms in float32, with their casts, each forward); on CPUs
    "autocast-<precision>" (float32 weights under autocast)."""
    if precision == "float32":
        return "float32"
    return f"{'cast' if device.startswith('cuda') else 'autocast'}-{precision}"


COMPUTE = "cuda:cast,cpu:autocast"
"""The compute modes of `compute_mode`, as an encoder's description records them for a
precision other than float32 (the fingerprint is made where the device is not known yet)."""


def described_compute(precision: str) -> dict[str, str]:
    """What an encoder's description holds of its compute mode: nothing for float32 (caches
    filled before the modes were recorded keep their fingerprint), else COMPUTE."""
    return {} if precision == "float32" else {"compute": COMPUTE}


def running(module: torch.nn.Module, device: str, mode: str) -> torch.nn.Module:
    """`module` on `device` as `mode` runs it: its weights cast for a "cast-" mode."""
    import torch

    module = module.to(device)
    if mode.startswith("cast-"):
        return module.to(getattr(torch, mode.removeprefix("cast-")))
    return module


def autocast_for(device: str, mode: str) -> contextlib.AbstractContextManager:
    """The context a forward runs in: autocast for an "autocast-" mode, else none (float32, or
    weights already cast)."""
    if not mode.startswith("autocast-"):
        return contextlib.nullcontext()
    return autocast(device, mode.removeprefix("autocast-"))


def in_compute_dtype(module: torch.nn.Module, device: str, precision: str) -> torch.nn.Module:
    """On a GPU, a frozen model's weights cast to its compute dtype (bfloat16, float16), as a
    hand-written inference loop casts them: under autocast alone they stay float32 and are cast
    again at every call. On the CPU, and in float32, the module as it is."""
    import torch

    if precision == "float32" or not device.startswith("cuda"):
        return module
    return module.to(getattr(torch, precision))


def to_device(array: np.ndarray, device: str) -> torch.Tensor:
    """A host array on `device`; to a GPU through pinned memory with a non-blocking copy."""
    import torch

    t = torch.from_numpy(array)
    if not device.startswith("cuda"):
        return t
    try:
        t = t.pin_memory()
    except RuntimeError:  # no pinned memory to be had (page-locked limit): a plain copy
        return t.to(device)
    return t.to(device, non_blocking=True)


def digest_files(paths: Iterable[Path], root: Path) -> str:
    """sha256 over (relative name, content) of each file, in sorted order; read once a process
    while each file's size, mtime and inode stay the same (a fill's plan and its in-process
    model load hash the same weights)."""
    paths = sorted(paths)
    seen = tuple((str(p), (s := p.stat()).st_size, s.st_mtime_ns, s.st_ino) for p in paths)
    key = (str(root), seen)
    if key not in _DIGESTS:
        _DIGESTS[key] = _digest(paths, root)
        while len(_DIGESTS) > 32:
            _DIGESTS.pop(next(iter(_DIGESTS)))
    return _DIGESTS[key]


_DIGESTS: dict[tuple, str] = {}


def _digest(paths: list[Path], root: Path) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(str(p.relative_to(root)).encode() + b"\0")
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()

"""Images across the hop as uint8: the image processor's resize and crop on the CPU, its rescale
and normalisation replayed on the model's device, equal bit for bit to the processor's own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:
    import torch

__all__ = ["Scaling", "host_block", "nested", "pixel_type", "replays", "scaling", "unnest"]

LEVELS = np.arange(256)
"""Every value a uint8 channel holds: the replay is checked on each of them."""


@dataclass(frozen=True)
class Scaling:
    """What a PIL-backend image processor does after its resize and crop, as float32 steps:
    `x op factor` (its rescale), then `(x - mean) / std` per channel (its normalisation)."""

    op: str
    """"mul", "div" (whichever of the two equals the processor's float64 rescale on all 256
    levels) or "none"."""
    factor: float
    mean: tuple[float, ...] | None
    """Float32 values, one a channel (None: no normalisation)."""
    std: tuple[float, ...] | None

    def apply(self, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """uint8 (n, channels, h, w) pixels, on any device, as the model's input in `dtype`."""
        import torch

        t = x.to(torch.float32)
        if self.op != "none":
            factor = torch.tensor(self.factor, dtype=torch.float32, device=t.device)
            t = t.mul_(factor) if self.op == "mul" else t.div_(factor)
        if self.mean is not None and self.std is not None:
            shape = (1, len(self.mean), 1, 1)
            t = t.sub_(torch.tensor(self.mean, dtype=torch.float32, device=t.device)
                       .view(shape)).div_(torch.tensor(self.std, dtype=torch.float32,
                                                       device=t.device).view(shape))
        return t.to(dtype)


def scaling(processor: Any, channels: int) -> Scaling | None:
    """The processor's rescale and normalisation as a Scaling that equals it on every uint8
    level, or None where none does (its pixels then cross the hop in float32, as they are)."""
    f32 = np.float32
    mean = std = None
    if getattr(processor, "do_normalize", False):
        mean, std = (tuple(float(f32(v)) for v in np.broadcast_to(
            np.asarray(getattr(processor, name), np.float64), (channels,)))
            for name in ("image_mean", "image_std"))
    if not getattr(processor, "do_rescale", False):
        return Scaling("none", 1.0, mean, std)
    s = float(processor.rescale_factor)
    want = (LEVELS.astype(np.float64) * s).astype(f32)  # the processor's rescale, per level
    for op, factor in (("div", f32(1 / s)), ("mul", f32(s))):
        got = LEVELS.astype(f32) / factor if op == "div" else LEVELS.astype(f32) * factor
        if np.array_equal(got, want):
            return Scaling(op, float(factor), mean, std)
    return None


def replays(processor: Any, found: Scaling, mode: str) -> bool:
    """Whether the processor's uint8 output (rescale and normalisation off) through `found`
    equals its own float32 output on a probe image (odd-sized noise: resized and cropped), so a
    processor that pads, or rescales before it resizes, keeps its float32 pixels."""
    import torch
    from PIL import Image

    noise = np.random.default_rng(0).integers(0, 256, (61, 83, 3), dtype=np.uint8)
    image = Image.fromarray(noise).convert(mode)
    want = processor(images=[image], return_tensors="np")["pixel_values"]
    raw = processor(images=[image], return_tensors="np", do_rescale=False,
                    do_normalize=False)["pixel_values"]
    if raw.dtype != np.uint8 or raw.shape != want.shape:
        return False
    return np.array_equal(found.apply(torch.from_numpy(raw), torch.float32).numpy(),
                          want.astype(np.float32))


def pixel_type(shape: tuple[int, ...], dtype: np.dtype) -> pa.DataType:
    """The Arrow type of one row of pixels of `shape`: nested fixed-size lists of `dtype`."""
    kind: pa.DataType = pa.from_numpy_dtype(dtype)
    for size in reversed(shape):
        kind = pa.list_(pa.field("element", kind, nullable=False), size)
    return kind


def nested(array: np.ndarray) -> pa.FixedSizeListArray:
    """An (n, *shape) array as nested fixed-size lists (one level per dimension), its values
    as they are (uint8: one byte a channel of a pixel)."""
    out: pa.Array = pa.array(np.ascontiguousarray(array).reshape(-1))
    for size in reversed(array.shape[1:]):
        kind = pa.list_(pa.field("element", out.type, nullable=False), size)
        out = pa.FixedSizeListArray.from_arrays(out, type=kind)
    return out


def unnest(prepared: pa.Array) -> np.ndarray:
    """Nested lists back to one (n, *shape) array of their values (no copy where Arrow holds
    them in one buffer)."""
    values = prepared.combine_chunks() if isinstance(prepared, pa.ChunkedArray) else prepared
    shape, kind = [], values.type
    while pa.types.is_fixed_size_list(kind):
        shape.append(kind.list_size)
        kind = kind.value_type
    flat = values
    for _ in shape:
        flat = flat.flatten()
    return flat.to_numpy(zero_copy_only=False).reshape(len(values), *shape)


def host_block(prepared: pa.Array, device: str) -> torch.Tensor:
    """A block's pixels (nested lists, in one chunk or several) as one host tensor that its
    forwards slice: for a GPU, each chunk copied once into pinned memory (each forward's slice
    then one non-blocking copy to the device); on the CPU, the Arrow buffer itself where the
    block is one chunk."""
    import warnings

    import torch

    chunks = prepared.chunks if isinstance(prepared, pa.ChunkedArray) else [prepared]
    parts = [unnest(c) for c in chunks if len(c)] or [unnest(prepared)]
    if not device.startswith("cuda"):
        array = parts[0] if len(parts) == 1 else np.concatenate(parts)
        with warnings.catch_warnings():  # read-only Arrow memory: only read (cast) from here
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(array)
    shape = (sum(len(p) for p in parts), *parts[0].shape[1:])
    dtype = torch.from_numpy(np.empty(0, parts[0].dtype)).dtype
    try:  # (page-locked blocks are cached by torch, reused once their copies are done)
        host = torch.empty(shape, dtype=dtype, pin_memory=True)
    except RuntimeError:  # no pinned memory to be had (page-locked limit): plain memory
        host = torch.empty(shape, dtype=dtype)
    view, at = host.numpy(), 0
    for part in parts:
        view[at:at + len(part)] = part
        at += len(part)
    return host

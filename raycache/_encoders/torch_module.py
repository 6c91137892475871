"""Any user torch module, built by a "package.module:function" factory, frozen."""

from __future__ import annotations

import hashlib
import importlib
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raycache._encoders.base import Batching, Family, autocast, freeze, to_device
from raycache._encoders.batching import to_host
from raycache._encoders.config import EncoderConfig
from raycache._errors import EncoderError

if TYPE_CHECKING:
    import torch

__all__ = ["TORCH_MODULE", "TorchModuleEncoder", "build", "describe", "factory", "rows",
           "state_digest", "trainable"]


def build(cfg: EncoderConfig) -> torch.nn.Module:
    """Import the factory and call it with the configured kwargs (a config read from a file
    is checked against the caller's trust first: raycache._encoders.trusted)."""
    ref = cfg.factory or ""
    mod_name, _, fn_name = ref.partition(":")
    if not mod_name or not fn_name:
        raise EncoderError(
            f"encoder {cfg.name!r}: factory={ref!r}; expected 'package.module:function'"
        )
    try:
        module = importlib.import_module(mod_name)
    except ImportError as exc:
        raise EncoderError(
            f"encoder {cfg.name!r}: factory={ref!r} does not import ({exc}); check the module "
            "name and that it is installed or on the job's working_dir"
        ) from exc
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise EncoderError(
            f"encoder {cfg.name!r}: factory={ref!r}: module {mod_name!r} has no callable "
            f"{fn_name!r}"
        )
    import torch

    net = fn(**cfg.kwargs)
    if not isinstance(net, torch.nn.Module):
        raise EncoderError(
            f"encoder {cfg.name!r}: factory={ref!r} returned {type(net).__name__}; "
            "expected a torch.nn.Module"
        )
    return net


def state_digest(net: torch.nn.Module) -> str:
    """sha256 over every parameter and buffer: name, dtype, shape and bytes."""
    import torch

    h = hashlib.sha256()
    for name, t in sorted(net.state_dict().items()):
        t = t.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}\0".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def describe(cfg: EncoderConfig) -> dict[str, Any]:
    net = None if cfg.trainable else build(cfg)  # a trainable one's weights change: not hashed
    module = importlib.import_module(cfg.factory.partition(":")[0])
    try:
        code = hashlib.sha256(inspect.getsource(module).encode()).hexdigest()
    except (OSError, TypeError) as exc:
        raise EncoderError(
            f"encoder {cfg.name!r}: the source of {cfg.factory!r} cannot be read to fingerprint "
            "it; ship the factory as a .py file"
        ) from exc
    return {
        "kind": cfg.kind,
        "input": cfg.input,
        "factory": cfg.factory,
        "kwargs": cfg.kwargs,
        "dtype": cfg.dtype,
        "precision": cfg.precision,
        "code_digest": code,
        "weights_digest": "" if net is None else state_digest(net),
        **({"trainable": True} if cfg.trainable else {}),
    }


def prepare(cfg: EncoderConfig) -> Callable[[pa.Array], pa.Array]:
    """The torch family needs no CPU stage: its inputs are numbers already."""

    def same(values: pa.Array) -> pa.Array:
        return values

    return same


class TorchModuleEncoder:
    def __init__(self, cfg: EncoderConfig, device: str, batching: Batching | None = None):
        self.cfg, self.device, self.batching = cfg, device, batching or Batching()
        self.prepare = prepare(cfg)
        self.net = freeze(build(cfg)).to(device)

    def weights_digest(self) -> str:
        return state_digest(self.net)

    def encode(self, values: pa.Array) -> np.ndarray:
        return self.forward(self.prepare(values))

    def forward(self, prepared: pa.Array) -> np.ndarray:
        import torch

        x = rows(self.cfg, prepared)
        parts = []
        for i in range(0, len(x), self.batching.max_rows):
            with torch.inference_mode(), autocast(self.device, self.cfg.precision):
                out = self.net(to_device(x[i : i + self.batching.max_rows], self.device))
            parts.append(out.reshape(out.shape[0], -1))  # one copy back, after the last
        return to_host(parts) if parts else np.empty((0, 0), np.float32)


def rows(cfg: EncoderConfig, prepared: pa.Array) -> np.ndarray:
    """A column of numbers or lists of numbers as float32 rows, (n, d)."""
    values = prepared.combine_chunks() if isinstance(prepared, pa.ChunkedArray) else prepared
    if pa.types.is_fixed_size_list(values.type) or pa.types.is_list(values.type) \
            or pa.types.is_large_list(values.type):
        if len(values) == 0:
            return np.empty((0, 0), np.float32)
        return _list_rows(cfg, values)
    if pa.types.is_integer(values.type) or pa.types.is_floating(values.type):
        return values.to_numpy(zero_copy_only=False).astype(np.float32)[:, None]
    raise EncoderError(
        f"encoder {cfg.name!r}: column {cfg.input!r} is {values.type}; the torch family takes "
        "numbers or lists of numbers"
    )


def _list_rows(cfg: EncoderConfig, values: pa.Array) -> np.ndarray:
    """A list column as one (n, width) float32 array, read from its flat values (no per-row
    Python); every row must hold the same number of values."""
    if pa.types.is_fixed_size_list(values.type):
        width = values.type.list_size
    else:
        lengths = pc.list_value_length(values).to_numpy(zero_copy_only=False)
        width = int(lengths[0]) if len(lengths) else 0
        if values.null_count or (lengths != width).any():
            bad = int(np.argmax(lengths != width)) if not values.null_count else \
                int(np.argmax(values.is_null().to_numpy(zero_copy_only=False)))
            raise EncoderError(
                f"encoder {cfg.name!r}: column {cfg.input!r} holds lists of different lengths "
                f"(row 0 has {width} values, row {bad} has {values[bad].as_py()!r:.60}); the "
                "torch family stacks rows into one tensor, so give every row the same length")
    if values.null_count:
        raise EncoderError(f"encoder {cfg.name!r}: column {cfg.input!r} has null rows; fill "
                           "or drop them before the fill")
    flat = values.flatten().to_numpy(zero_copy_only=False)
    return flat.astype(np.float32).reshape(len(values), width)  # a writable copy for torch


def trainable(cfg: EncoderConfig) -> torch.nn.Module:
    """The factory's module, trainable: float32 rows (see `rows`) in, (n, dim) out."""
    from raycache._encoders.live import Flatten

    return Flatten(build(cfg))


def factory(cfg: EncoderConfig) -> str | None:
    """The code building `cfg` runs: its factory (raycache._encoders.trusted checks it)."""
    return cfg.factory


TORCH_MODULE = Family(describe=describe, load=TorchModuleEncoder, prepare=prepare,
                      live=trainable, rows=rows, code=factory)

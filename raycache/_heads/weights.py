"""A head's weights on storage: written as safetensors, read from head.safetensors or from the
torch pickle (head.pt) older raycaches wrote, the latter weights-only (no code runs on load)."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

from raycache._heads.specs import HEAD_WEIGHTS, LEGACY_WEIGHTS

if TYPE_CHECKING:
    import torch

    from raycache._cache.store import Store

__all__ = ["WEIGHT_FILES", "decode", "encode", "read"]

WEIGHT_FILES = (HEAD_WEIGHTS, LEGACY_WEIGHTS)
"""The names a checkpoint folder may hold its head's weights under, the preferred first."""


def encode(state: dict[str, torch.Tensor]) -> bytes:
    """A state_dict as safetensors bytes (each tensor copied: shared storage is not allowed)."""
    from safetensors.torch import save

    return save({k: v.detach().cpu().contiguous().clone() for k, v in state.items()})


def decode(blob: bytes, name: str) -> dict[str, torch.Tensor]:
    """The state_dict in `blob`, read by the form its file `name` says."""
    if name == LEGACY_WEIGHTS:
        import torch

        return torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)
    from safetensors.torch import load

    return load(blob)


def read(folder: Store) -> tuple[str, bytes]:
    """The name and bytes of a checkpoint folder's weights file (head.safetensors, else head.pt).

    Raises:
        FileNotFoundError: The folder holds neither.
    """
    for name in WEIGHT_FILES:
        try:
            return name, folder.read_bytes(folder.path(name))
        except FileNotFoundError:
            continue
    raise FileNotFoundError(f"no {' or '.join(WEIGHT_FILES)} in it")

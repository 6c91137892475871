"""Length-aware batching: sort rows by length, cut batches by a token budget, restore order."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from raycache._core.marks import add, mark

if TYPE_CHECKING:
    import torch

__all__ = ["Batching", "by_length", "encode_sorted", "pad_ids", "to_host"]


def by_length(lengths: np.ndarray, max_rows: int, token_budget: int) -> Iterator[np.ndarray]:
    """Row indices in batches of similar length: each batch holds at most `max_rows` rows and
    at most `token_budget` padded tokens (rows x longest row), and at least one row."""
    order = np.argsort(lengths, kind="stable")
    i, n = 0, len(order)
    while i < n:
        j = i + 1
        while j < n and j - i < max_rows and (j - i + 1) * lengths[order[j]] <= token_budget:
            j += 1  # lengths are ascending, so the newest row is the longest
        yield order[i:j]
        i = j


def encode_sorted(
    lengths: np.ndarray,
    max_rows: int,
    token_budget: int,
    forward: Callable[[np.ndarray], torch.Tensor],
) -> np.ndarray:
    """Run `forward(indices) -> (len(indices), dim)` over length-sorted batches and put the
    outputs back in the rows' original order, as one float32 array. Nothing waits on the
    device between batches: on a GPU the next batch is padded and sent while this one runs,
    and the outputs come back in one copy (`to_host`)."""
    parts, order = [], []
    for idx in by_length(lengths, max_rows, token_budget):
        parts.append(forward(idx))
        order.append(idx)
        add("forwards", 1)  # (a bench's block timeline)
    if not parts:
        return np.empty((0, 0), np.float32)
    mark("launched")  # every batch queued on the device (a bench's block timeline)
    sorted_rows = to_host(parts)
    out = np.empty_like(sorted_rows)
    out[np.concatenate(order)] = sorted_rows
    return out


def to_host(parts: list[torch.Tensor]) -> np.ndarray:
    """Batches of outputs, (n_i, dim) each, as one float32 host array: joined where they were
    computed, then one copy (one wait on a GPU, not one per batch)."""
    import torch

    joined = (parts[0] if len(parts) == 1 else torch.cat(parts)).float()
    if not joined.is_cuda:
        return joined.numpy()
    host = torch.empty(joined.shape, dtype=joined.dtype, pin_memory=True)  # (cached by torch)
    return host.copy_(joined).numpy()  # into page-locked memory: the copy at the bus's speed


def pad_ids(ids: pa.ListArray, idx: np.ndarray, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows `idx` of a `list<int>` column as a right-padded (n, longest) int64 matrix, and the
    length of each row."""
    offsets = ids.offsets.to_numpy()
    values = ids.values.to_numpy(zero_copy_only=False)
    starts, ends = offsets[idx], offsets[idx + 1]
    lengths = ends - starts
    width = int(lengths.max()) if len(idx) else 0
    out = np.full((len(idx), width), pad_id, np.int64)
    cols = np.arange(width)
    mask = cols[None, :] < lengths[:, None]
    out[mask] = values[(starts[:, None] + cols[None, :])[mask]]
    return out, lengths


@dataclass(frozen=True)
class Batching:
    """How an encoder cuts the rows of one call into forward passes.

    Example:
        ```python
        head = raycache.load_head(run.checkpoint).to("cuda", raycache.Batching(max_rows=256))
        ```
    """

    max_rows: int = 64
    """Rows per forward pass at most."""
    token_budget: int = 2048
    """Padded tokens (rows x longest row) per forward pass at most, for sequence inputs."""

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


def by_length(lengths: np.ndarray, max_rows: int, token_budget: int,
              packed: bool = False) -> Iterator[np.ndarray]:
    """Row indices in batches of similar length: each batch holds at most `max_rows` rows and
    at most `token_budget` tokens (padded: rows x longest row; `packed`: the rows' own tokens),
    and at least one row."""
    order = np.argsort(lengths, kind="stable")
    i, n = 0, len(order)
    while i < n:
        j, tokens = i + 1, int(lengths[order[i]])
        while j < n and j - i < max_rows:
            tokens += int(lengths[order[j]])  # lengths are ascending: the newest row is longest
            if (tokens if packed else (j - i + 1) * lengths[order[j]]) > token_budget:
                break
            j += 1
        yield order[i:j]
        i = j


def encode_sorted(
    lengths: np.ndarray,
    max_rows: int,
    token_budget: int,
    forward: Callable[[np.ndarray], torch.Tensor],
    dtype: str = "float32",
    packed: bool = False,
) -> np.ndarray:
    """Run `forward(indices) -> (len(indices), dim)` over length-sorted batches, each batch's
    output cast to `dtype` and written at its rows' original positions in one array on the
    device (the un-sort and the cast done there), then one copy to the host. Nothing waits on
    the device between batches: on a GPU the next batch is built and sent while this one runs."""
    import torch

    out = None
    for idx in by_length(lengths, max_rows, token_budget, packed):
        part = forward(idx)
        if out is None:
            out = torch.empty((len(lengths), part.shape[1]), dtype=getattr(torch, dtype),
                              device=part.device)
        index = torch.from_numpy(idx.astype(np.int64))
        if part.is_cuda:
            index = index.pin_memory().to(part.device, non_blocking=True)
        out.index_copy_(0, index, part.to(out.dtype))
        add("forwards", 1)  # (a bench's block timeline)
    if out is None:
        return np.empty((0, 0), dtype)
    mark("launched")  # every batch queued on the device (a bench's block timeline)
    return _copied(out)


def to_host(parts: list[torch.Tensor]) -> np.ndarray:
    """Batches of outputs, (n_i, dim) each, as one float32 host array: joined where they were
    computed, then one copy (one wait on a GPU, not one per batch)."""
    import torch

    return _copied((parts[0] if len(parts) == 1 else torch.cat(parts)).float())


def _copied(t: torch.Tensor) -> np.ndarray:
    """A device tensor on the host in one copy: from a GPU into page-locked memory (at the
    bus's speed) that torch's host allocator hands out again once the array is freed, so the
    blocks of a fill reuse the same pinned buffers without one array aliasing another's."""
    import torch

    if not t.is_cuda:
        return t.numpy()
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    return host.copy_(t).numpy()


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
    """Padded tokens (rows x longest row) per forward pass at most, for sequence inputs (the
    rows' own tokens, for packed batches)."""

    @classmethod
    def on(cls, gpu: bool) -> Batching:
        """The default forward sizes of a pool.

        Args:
            gpu: Whether the pool's models run on GPUs.

        Returns:
            On CPUs 256 rows and 2,048 tokens; on GPUs 16,384 rows and 262,144 tokens (a
            forward long enough that launching it costs little next to running it).

        Example:
            ```python
            raycache.Batching.on(gpu=True)  # Batching(max_rows=16384, token_budget=262144)
            ```
        """
        return cls(16384, 262144) if gpu else cls(256, 2048)

"""Unpadded forwards of BERT-family text models: a batch's rows as one token row with cumulative
lengths (cu_seqlens), attention kept inside each row through an attention function registered
with transformers, outputs pooled by segment. Everything about the packing is decided on the
host, so a forward waits on nothing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from raycache._encoders.base import to_device

if TYPE_CHECKING:
    import torch

__all__ = ["ATTENTION", "FIRST_POSITION", "SEGMENT_POOLINGS", "Packed", "pack", "register",
           "supports"]

ATTENTION = "raycache_packed"
"""The name the packed attention function is registered under (AttentionInterface)."""

FIRST_POSITION: dict[str, Callable[[Any], int]] = {
    "bert": lambda config: 0,
    "roberta": lambda config: config.pad_token_id + 1,
    "xlm-roberta": lambda config: config.pad_token_id + 1,
}
"""The model types that run packed (their attention goes through transformers' attention
interface and their embeddings take position ids), and each one's first position id: BERT counts
from 0, RoBERTa and XLM-R from the pad id + 1. MPNet (its own attention, with a relative
position bias) and the rest keep padded batches."""


def supports(config: Any) -> bool:
    """Whether a model of this config runs packed (its `model_type` in FIRST_POSITION)."""
    return getattr(config, "model_type", None) in FIRST_POSITION


@dataclass(frozen=True)
class Packed:
    """One packed batch, on the device: its token row and what the attention and the pooling
    need, all built from host-side lengths."""

    input_ids: torch.Tensor
    """(1, tokens): the rows' tokens one after another."""
    position_ids: torch.Tensor
    """(1, tokens): positions restarting at each row."""
    cu: torch.Tensor
    """(rows + 1,) int32: where each row starts, and the total."""
    longest: int
    """The longest row (tokens)."""
    segment: torch.Tensor
    """(tokens,) int64: each token's row."""
    lengths: torch.Tensor
    """(rows, 1) float32: tokens of each row."""
    padded: torch.Tensor
    """(rows * longest,) int64 gather of the padded layout (pad slots point at token 0)."""
    key_mask: torch.Tensor
    """(rows, 1, 1, longest) bool: which slots of the padded layout hold a token."""
    unpad: torch.Tensor
    """(tokens,) int64: each token's slot in the padded layout."""
    varlen: bool
    """Run torch's varlen (flash) attention, else the exact padded reference."""


def pack(ids: pa.ListArray, idx: np.ndarray, first: int, device: str, varlen: bool) -> Packed:
    """Rows `idx` of a `list<int>` column as one packed batch on `device` (positions from
    `first`), every index computed here with numpy."""
    offsets = ids.offsets.to_numpy()
    values = ids.values.to_numpy(zero_copy_only=False)
    starts, lengths = offsets[idx], offsets[idx + 1] - offsets[idx]
    n, total = len(idx), int(lengths.sum())
    cu = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=cu[1:])
    segment = np.repeat(np.arange(n), lengths)
    within = np.arange(total) - cu[:-1][segment]  # each token's place in its row
    tokens = values[starts[segment] + within].astype(np.int64)
    longest = int(lengths.max()) if n else 0
    unpad = segment * longest + within
    padded = np.zeros(n * longest, np.int64)
    padded[unpad] = np.arange(total)
    key_mask = (np.arange(longest)[None, :] < lengths[:, None])[:, None, None, :]
    put = lambda a: to_device(np.ascontiguousarray(a), device)  # noqa: E731
    return Packed(put(tokens[None]), put((within + first)[None]), put(cu.astype(np.int32)),
                  longest, put(segment), put(lengths.astype(np.float32)[:, None]), put(padded),
                  put(key_mask), put(unpad), varlen)


def attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
              value: torch.Tensor, attention_mask: torch.Tensor | None,
              scaling: float | None = None, dropout: float = 0.0, packed: Packed | None = None,
              **kwargs: Any) -> tuple[torch.Tensor, None]:
    """The attention function of a packed forward: (1, heads, tokens, head_dim) in, each token
    attending to its own row only; (1, tokens, heads, head_dim) out."""
    import torch

    if packed is None:
        raise TypeError(f"attention {ATTENTION!r} runs packed batches only: call the model with "
                        "`packed=` (raycache._encoders.packed.pack)")
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # (tokens, heads, dim)
    if packed.varlen:
        from torch.nn.attention.varlen import varlen_attn

        out = varlen_attn(q, k, v, packed.cu, packed.cu, packed.longest, packed.longest,
                          scale=scaling)
        return out.unsqueeze(0), None
    n, width = packed.key_mask.shape[0], packed.longest
    heads, dim = q.shape[1], q.shape[2]
    to_padded = lambda t: t[packed.padded].view(n, width, heads, dim).transpose(1, 2)  # noqa: E731
    out = torch.nn.functional.scaled_dot_product_attention(
        to_padded(q), to_padded(k), to_padded(v), attn_mask=packed.key_mask, scale=scaling)
    out = out.transpose(1, 2).reshape(n * width, heads, dim)[packed.unpad]
    return out.unsqueeze(0), None


def register() -> None:
    """The packed attention function in transformers' AttentionInterface (once a process)."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION, attention)


def _sum(hidden: torch.Tensor, p: Packed) -> torch.Tensor:
    import torch

    out = torch.zeros((p.lengths.shape[0], hidden.shape[1]), dtype=hidden.dtype,
                      device=hidden.device)
    return out.index_add_(0, p.segment, hidden)


def _max(hidden: torch.Tensor, p: Packed) -> torch.Tensor:
    import torch

    out = torch.full((p.lengths.shape[0], hidden.shape[1]), float("-inf"), dtype=hidden.dtype,
                     device=hidden.device)
    return out.scatter_reduce_(0, p.segment[:, None].expand_as(hidden), hidden, "amax")


SEGMENT_POOLINGS: dict[str, Callable[[torch.Tensor, Packed], torch.Tensor]] = {
    "mean": lambda h, p: _sum(h, p) / p.lengths,
    "mean_sqrt_len": lambda h, p: _sum(h, p) / p.lengths.sqrt(),
    "cls": lambda h, p: h[p.cu[:-1].long()],
    "lasttoken": lambda h, p: h[p.cu[1:].long() - 1],
    "max": _max,
}
"""The POOLINGS of raycache._encoders.pooling over a packed batch's (tokens, hidden) states:
each row's segment pooled as the padded pooling pools its row."""

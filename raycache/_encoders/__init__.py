"""Frozen encoders: a protocol, and a dict registry of families keyed by config `kind`."""

from raycache._encoders.base import Batching, Encoder, Family, digest_files, freeze
from raycache._encoders.hf_image import HF_IMAGE
from raycache._encoders.hf_text import HF_TEXT
from raycache._encoders.torch_module import TORCH_MODULE

ENCODERS: dict[str, Family] = {
    "hf-image": HF_IMAGE,
    "hf-text": HF_TEXT,
    "torch": TORCH_MODULE,
}

__all__ = ["ENCODERS", "Batching", "Encoder", "Family", "digest_files", "freeze"]

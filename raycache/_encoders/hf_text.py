"""Hugging Face transformers text encoders: a folder, package or hub model id, pooled and
normalised as its sentence-transformers config says (else mean pooling and L2 norm)."""

from __future__ import annotations

import functools
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from raycache._core.config import AUTO
from raycache._encoders import packed
from raycache._encoders.base import (
    Batching,
    Family,
    autocast_for,
    compute_mode,
    described_compute,
    digest_files,
    freeze,
    running,
    to_device,
)
from raycache._encoders.batching import encode_sorted, pad_ids
from raycache._encoders.config import EncoderConfig
from raycache._encoders.models import model_folder
from raycache._encoders.pooling import POOLINGS
from raycache._encoders.st_folder import declared
from raycache._errors import BadInput, EncoderError

if TYPE_CHECKING:
    import torch

__all__ = ["HF_TEXT", "HFTextEncoder", "Settings", "Tokenize", "describe", "resolve", "rows",
           "settings", "trainable"]

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
SKIP = {"README.md", ".gitattributes"}


def resolve(path: str | None, name: str) -> Path:
    """The model folder `path` names (raycache._encoders.models)."""
    return model_folder(path, name)


@dataclass(frozen=True)
class Settings:
    """An encoder's settings with `auto` resolved from its folder: a sentence-transformers
    folder's own pooling, Normalize and max_seq_length; else mean pooling, L2 norm, 256 tokens."""

    folder: Path
    pooling: str
    normalize: bool
    max_length: int
    lowercase: bool


def settings(cfg: EncoderConfig) -> Settings:
    folder = resolve(cfg.path, cfg.name)
    st = declared(folder, cfg.name)
    plain = st.pooling is None  # not a sentence-transformers folder
    return Settings(
        folder,
        st.pooling or "mean" if cfg.pooling == AUTO else cfg.pooling,
        (True if plain else bool(st.normalize)) if cfg.normalize == AUTO else cfg.normalize,
        (st.max_length or 256) if cfg.max_length == AUTO else int(cfg.max_length),
        st.lowercase)


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
    config = json.loads((folder / "config.json").read_text())
    hidden = config.get("hidden_size")
    _packs(cfg, config.get("model_type"))
    s = settings(cfg)
    return {
        "kind": cfg.kind,
        "input": cfg.input,
        "pooling": s.pooling,
        "normalize": s.normalize,
        "max_length": s.max_length,
        **({"lowercase": True} if s.lowercase else {}),
        "dtype": cfg.dtype,
        "precision": cfg.precision,
        **described_compute(cfg.precision),
        "dim": hidden,
        "weights_digest": "" if cfg.trainable else digest_files(weights, folder),
        "config_digest": digest_files(others, folder),
        **({"trainable": True} if cfg.trainable else {}),
    }


def _packs(cfg: EncoderConfig, model_type: str | None) -> None:
    """Refuse attention: packed for a model type without a packed forward."""
    if cfg.attention == "packed" and model_type not in packed.FIRST_POSITION:
        raise EncoderError(
            f"encoder {cfg.name!r}: attention='packed', but its model_type {model_type!r} has "
            f"no packed forward (those that do: {sorted(packed.FIRST_POSITION)}); set "
            "attention: auto or padded")


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
        self.cfg, self.settings = cfg, settings(cfg)
        self.tokenizer = _tokenizer(str(self.settings.folder), self.settings.max_length)

    def __call__(self, values: pa.Array) -> pa.Array:
        texts = values.to_pylist()
        bad = next((t for t in texts if not isinstance(t, str)), _OK)
        if bad is not _OK:
            raise BadInput(
                f"encoder {self.cfg.name!r}: column {self.cfg.input!r} holds {bad!r} "
                f"({type(bad).__name__}); hf-text needs strings "
                f"({sum(not isinstance(t, str) for t in texts)} of {len(texts)} rows are not). "
                "Fill empty values in the source or drop those rows", bad, self.cfg.input)
        if self.settings.lowercase:  # the folder's sentence_bert_config says do_lower_case
            texts = [t.lower() for t in texts]
        if hasattr(self.tokenizer, "encode_batch"):  # the fast call: the same ids, no offsets
            encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)
            ids = [e.ids for e in encode(texts, add_special_tokens=True)]
        else:
            ids = self.tokenizer(texts, truncation=True, max_length=self.settings.max_length,
                                 return_attention_mask=False,
                                 return_token_type_ids=False)["input_ids"]
        lengths = np.fromiter((len(row) for row in ids), np.int32, len(ids))
        offsets = np.zeros(len(ids) + 1, np.int32)
        np.cumsum(lengths, out=offsets[1:])
        flat = np.fromiter(itertools.chain.from_iterable(ids), np.int32, int(offsets[-1]))
        return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat))


class HFTextEncoder:
    """Pooled transformer embeddings (see Settings), over length-sorted batches of token ids:
    padded, or packed (raycache._encoders.packed) as EncoderConfig.attention says. Every mask
    and index is decided on the host, so a forward never waits on the device."""

    casts_on_device = True
    """forward takes the storage dtype (raycache._encoders.base.forward_stored)."""

    def __init__(self, cfg: EncoderConfig, device: str, batching: Batching | None = None):
        self.cfg, self.device, self.batching = cfg, device, batching or Batching()
        self.prepare = Tokenize(cfg)
        s = self.prepare.settings
        self.pool, self.segment_pool = POOLINGS[s.pooling], packed.SEGMENT_POOLINGS[s.pooling]
        self.pad_id = 0  # padded positions are masked out of attention and pooling
        self.mode = compute_mode(device, cfg.precision)
        plain = _plain_bert(cfg, device, s.folder)
        model = plain or _library_model(s.folder)
        self.packed = False
        if plain is None:  # transformers' model
            _packs(cfg, model.config.model_type)
            self.packed = cfg.attention == "packed" or (
                cfg.attention == AUTO and device.startswith("cuda")
                and self.mode.startswith("cast-") and packed.supports(model.config))
        if self.packed:
            packed.register()
            model.set_attn_implementation(packed.ATTENTION)
            self.first = packed.FIRST_POSITION[model.config.model_type](model.config)
        self.attention = plain.attention if plain else model.config._attn_implementation
        self.model = running(freeze(model), device, self.mode)
        self.varlen = self.packed and self.mode.startswith("cast-") and _flash(device)

    def weights_digest(self) -> str:
        folder, weights, _ = _files(self.cfg)
        return digest_files(weights, folder)

    def encode(self, values: pa.Array) -> np.ndarray:
        return self.forward(self.prepare(values))

    def forward(self, prepared: pa.Array, dtype: str = "float32") -> np.ndarray:
        """Embeddings of `prepared` in input order, as `dtype` where the cast is exact to do on
        the device (normalised embeddings: float16 cannot overflow them), else float32."""
        import torch

        ids = prepared.combine_chunks() if isinstance(prepared, pa.ChunkedArray) else prepared
        lengths = np.diff(ids.offsets.to_numpy())
        out = dtype if self.prepare.settings.normalize else "float32"
        b, run = self.batching, self._packed if self.packed else self._padded
        with torch.inference_mode():
            return encode_sorted(lengths, b.max_rows, b.token_budget,
                                 functools.partial(run, ids), out, self.packed)

    def _padded(self, ids: pa.ListArray, idx: np.ndarray) -> torch.Tensor:
        matrix, lens = pad_ids(ids, idx, self.pad_id)
        input_ids = to_device(matrix, self.device)
        mask = to_device(np.arange(matrix.shape[1])[None, :] < lens[:, None], self.device)
        uneven = bool(lens.min() < matrix.shape[1])  # numpy: decided on the host
        with autocast_for(self.device, self.mode):
            hidden = self.model(input_ids=input_ids,
                                attention_mask=self._attention_mask(mask) if uneven else None)
        return self._normalized(self.pool(hidden.last_hidden_state.float(), mask))

    def _attention_mask(self, mask: torch.Tensor) -> torch.Tensor:
        """The padding mask as the model's attention takes it without looking inside: 4D (a 2D
        mask makes transformers' SDPA path test `mask.all()`, a wait on the device)."""
        import torch

        kind = self.attention
        if kind == "sdpa":
            return mask[:, None, None, :]
        if kind == "eager":
            low = torch.finfo(self.model.dtype).min
            return (~mask[:, None, None, :]).to(self.model.dtype) * low
        return mask.long()  # another attention (flash): its own 2D handling

    def _packed(self, ids: pa.ListArray, idx: np.ndarray) -> torch.Tensor:
        import torch

        batch = packed.pack(ids, idx, self.first, self.device, self.varlen)
        with autocast_for(self.device, self.mode):
            hidden = self.model(input_ids=batch.input_ids, position_ids=batch.position_ids,
                                token_type_ids=torch.zeros_like(batch.input_ids), packed=batch)
        return self._normalized(self.segment_pool(hidden.last_hidden_state[0].float(), batch))

    def _normalized(self, pooled: torch.Tensor) -> torch.Tensor:
        import torch

        if self.prepare.settings.normalize:
            return torch.nn.functional.normalize(pooled, p=2, dim=1)
        return pooled


def _plain_bert(cfg: EncoderConfig, device: str, folder: Path) -> torch.nn.Module | None:
    """On the CPU, the model of a plain BERT `folder` without transformers (raycache._encoders.bert:
    the same outputs, without the library's 3 s of imports); None elsewhere (a GPU, packed
    attention, another model or weight layout)."""
    if device.startswith("cuda") or cfg.attention == "packed":
        return None
    from raycache._encoders import bert

    config = bert.plain(folder)
    return bert.load(folder, config) if config else None


def _library_model(folder: Path) -> torch.nn.Module:
    """transformers' model of `folder`."""
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one progress bar per fill, the driver's
    return AutoModel.from_pretrained(folder)


def _flash(device: str) -> bool:
    """Whether torch's varlen (flash) attention runs on `device`: a CUDA card of compute
    capability 8.0 or more (Ampere and later)."""
    import torch

    return device.startswith("cuda") and torch.cuda.get_device_capability(device) >= (8, 0)


_OK = object()

def rows(cfg: EncoderConfig, prepared: pa.Array) -> np.ndarray:
    """Token ids (Tokenize's lists) as an (n, longest) int32 matrix padded with -1."""
    ids = prepared.combine_chunks() if isinstance(prepared, pa.ChunkedArray) else prepared
    matrix, _ = pad_ids(ids, np.arange(len(ids)), -1)
    return matrix.astype(np.int32)


def trainable(cfg: EncoderConfig) -> torch.nn.Module:
    """The model, trainable: `rows` of token ids in, pooled (n, hidden) out."""
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    from raycache._encoders.live import Pooled

    hf_logging.disable_progress_bar()
    s = settings(cfg)
    return Pooled(AutoModel.from_pretrained(s.folder), POOLINGS[s.pooling], s.normalize)


HF_TEXT = Family(describe=describe, load=HFTextEncoder, prepare=Tokenize, live=trainable,
                 rows=rows)

"""Use a trained head: load it from its checkpoint folder alone (no Ray, no cache), and predict
from raw inputs (running its frozen encoders live) or from embeddings."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from raycache.config import EncoderConfig
from raycache.errors import RaycacheError
from raycache.heads import HEAD_CONFIG, HEAD_WEIGHTS, HeadSpec, build_head

__all__ = ["Head", "load_head"]


@dataclass
class Head:
    """A trained head, with the spec it was built from (encoders, label, classes)."""

    model: torch.nn.Module
    spec: HeadSpec
    info: dict[str, Any] = field(default_factory=dict, repr=False)
    """head.json's metrics, best epoch and history."""
    _encoders: list | None = field(default=None, repr=False)

    def embed_embeddings(self, x: np.ndarray | torch.Tensor) -> np.ndarray:
        """The head's output for rows of concatenated embeddings (the cache's columns, in spec
        order): a similarity head's embeddings (unit length when trained with normalize), a
        classifier's logits."""
        with torch.inference_mode():
            return self.model(torch.as_tensor(x, dtype=torch.float32)).float().numpy()

    def embed(self, inputs: dict[str, list] | list) -> np.ndarray:
        """Head embeddings for raw inputs: runs the head's frozen encoders live, then the head
        (search with them: cosine or dot against a gallery embedded the same way)."""
        return self.embed_embeddings(self.features(inputs))

    def predict_embeddings(self, x: np.ndarray | torch.Tensor) -> np.ndarray:
        """Class ids for rows of concatenated embeddings (the cache's columns, in spec order)."""
        if self.spec.objective != "classification":
            raise RaycacheError(
                f"this head was trained with objective {self.spec.objective!r}: it maps rows to "
                f"{self.spec.width}-d embeddings and has no classes to predict; use "
                "Head.embed / embed_embeddings, and compare embeddings (nearest neighbours)")
        return self.embed_embeddings(x).argmax(1)

    def predict(self, inputs: dict[str, list] | list) -> np.ndarray:
        """Class ids for raw inputs: runs the head's frozen encoders live, then the head.

        `inputs` maps each encoder's input column to values; a plain list is enough when the
        head uses one encoder.
        """
        return self.predict_embeddings(self.features(inputs))

    def features(self, inputs: dict[str, list] | list) -> np.ndarray:
        """Raw inputs through the head's frozen encoders (weights checked against the ones the
        head was trained on): the concatenated embeddings the head reads."""
        configs = self.encoder_configs()
        if not isinstance(inputs, dict):
            if len(configs) != 1:
                raise RaycacheError(f"this head uses {len(configs)} encoders; pass a dict of "
                                    f"columns {[c.input for c in configs]}")
            inputs = {configs[0].input: list(inputs)}
        if self._encoders is None:
            from raycache.encoders import REGISTRY

            self._encoders = [REGISTRY[c.kind].load(c, "cpu") for c in configs]
            for enc, c in zip(self._encoders, configs, strict=True):
                want, got = self.spec.weights_digests.get(c.name), enc.weights_digest()
                if want and got != want:
                    self._encoders = None
                    raise RaycacheError(
                        f"encoder {c.name!r} loads weights {got[:12]}, but the head was trained "
                        f"on embeddings of weights {want[:12]}; install the model the cache "
                        "was filled with, or retrain the head on a fill of this model")
        feats = [enc.encode(pa.array(inputs[c.input]))
                 for enc, c in zip(self._encoders, configs, strict=True)]
        return np.concatenate(feats, axis=1)

    def encoder_configs(self) -> list[EncoderConfig]:
        """The frozen encoders' fill configs, as recorded in head.json."""
        missing = [e for e in self.spec.encoders if e not in self.spec.encoder_configs]
        if missing:
            raise RaycacheError(f"head.json does not record how to build encoders {missing}; "
                                "the cache was filled by an older raycache: fill it again and "
                                "retrain to predict from raw inputs (predict_embeddings works)")
        return [EncoderConfig(**self.spec.encoder_configs[e]) for e in self.spec.encoders]


def load_head(checkpoint: str, **options: Any) -> Head:
    """Load head.pt and head.json from a checkpoint folder (a path or any fsspec URI;
    `options` are fsspec storage options, e.g. client_kwargs)."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(checkpoint, **options)
    path = path.rstrip("/")
    where = f"{checkpoint}/{HEAD_CONFIG}"
    try:
        saved = json.loads(fs.cat_file(f"{path}/{HEAD_CONFIG}"))
        blob = fs.cat_file(f"{path}/{HEAD_WEIGHTS}")
    except FileNotFoundError as exc:
        raise RaycacheError(f"{checkpoint!r} is not a head checkpoint ({exc}); pass a "
                            "checkpoint folder holding head.json and head.pt, e.g. "
                            "TrainResult.checkpoint") from exc
    spec = HeadSpec.from_dict(saved["head"], where)
    model = build_head(spec)
    model.load_state_dict(torch.load(io.BytesIO(blob), map_location="cpu"))
    model.eval()
    return Head(model, spec, {k: v for k, v in saved.items() if k != "head"})

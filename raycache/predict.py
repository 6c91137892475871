"""Use a trained head: load its checkpoint, and predict from raw inputs or from embeddings."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from raycache.cache import open_cache
from raycache.config import EncoderConfig
from raycache.encoders import REGISTRY
from raycache.errors import RaycacheError
from raycache.loop import HEAD_CONFIG, HEAD_WEIGHTS, build_head
from raycache.store import Store


@dataclass
class Head:
    """A trained head, with the spec it was trained with (encoders, label, classes)."""

    model: torch.nn.Module
    spec: dict[str, Any]
    store: Store
    _encoders: list | None = field(default=None, repr=False)

    def predict_embeddings(self, x: np.ndarray | torch.Tensor) -> np.ndarray:
        """Class ids for rows of concatenated embeddings (the cache's columns, in spec order)."""
        with torch.inference_mode():
            return self.model(torch.as_tensor(x, dtype=torch.float32)).argmax(1).numpy()

    def predict(self, inputs: dict[str, list] | list) -> np.ndarray:
        """Class ids for raw inputs: runs the cache's frozen encoders live, then the head.

        `inputs` maps each encoder's input column to values; a plain list is enough when the
        head uses one encoder.
        """
        configs = self._encoder_configs()
        if not isinstance(inputs, dict):
            if len(configs) != 1:
                raise RaycacheError(f"this head uses {len(configs)} encoders; pass a dict of "
                                    f"columns {[c.input for c in configs]}")
            inputs = {configs[0].input: list(inputs)}
        if self._encoders is None:
            self._encoders = [REGISTRY[c.kind].load(c, "cpu") for c in configs]
        feats = [enc.encode(pa.array(inputs[c.input]))
                 for enc, c in zip(self._encoders, configs, strict=True)]
        return self.predict_embeddings(np.concatenate(feats, axis=1))

    def _encoder_configs(self) -> list[EncoderConfig]:
        cache = open_cache(self.spec["cache"], self.store, self.spec["fingerprint"])
        saved = cache.manifest.extra.get("encoder_configs", {})
        missing = [e for e in self.spec["encoders"] if e not in saved]
        if missing:
            raise RaycacheError(f"cache {cache.name} does not record how to build {missing}; "
                                "fill it again with this raycache version")
        return [EncoderConfig(**saved[e]) for e in self.spec["encoders"]]


def load_head(checkpoint: str, store: Store | str | None = None) -> Head:
    """Load head.pt and head.json from a checkpoint folder (a path or any fsspec URI)."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(checkpoint)
    spec = json.loads(fs.cat_file(f"{path}/{HEAD_CONFIG}"))
    state = torch.load(io.BytesIO(fs.cat_file(f"{path}/{HEAD_WEIGHTS}")), map_location="cpu")
    model = build_head(spec)
    model.load_state_dict(state)
    model.eval()
    if not isinstance(store, Store):
        store = Store(store) if store else Store(spec["store"]["uri"], spec["store"]["options"])
    return Head(model, spec, store)

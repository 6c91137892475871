"""Use a trained head: load it from its checkpoint folder alone (no Ray, no cache), and predict
from raw inputs (running its frozen encoders live, and its trained ones inside the model) or
from embeddings."""

from __future__ import annotations

import io
import json
import pickle
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from raycache._cache.store import Store
from raycache._encoders.batching import Batching
from raycache._encoders.config import EncoderConfig
from raycache._errors import RaycacheError
from raycache._heads.joint import Inputs, build_model, encoder_config
from raycache._heads.specs import HEAD_CONFIG, HEAD_WEIGHTS, HeadSpec

__all__ = ["LIVE_ROWS", "Head", "load_head"]

LIVE_ROWS = 256
"""Rows per forward pass of a head with trainable encoders (they run inside the model)."""


@dataclass
class Head:
    """A trained head, with the spec it was built from (encoders, label, classes)."""

    model: torch.nn.Module
    spec: HeadSpec
    info: dict[str, Any] = field(default_factory=dict, repr=False)
    """head.json's metrics, best epoch and history (and the cache's key column)."""
    device: str = "cpu"
    """Where the head and its encoders run (see `to`)."""
    batching: Batching | None = field(default=None, repr=False)
    """How the encoders cut rows into forward passes (None: their default)."""
    _encoders: list | None = field(default=None, repr=False)

    @property
    def key(self) -> str | None:
        """The key column of the cache the head was trained on (None for older checkpoints)."""
        return self.info.get("key")

    def to(self, device: str, batching: Batching | None = None) -> Head:
        """Run the head and its frozen encoders on `device` ("cpu", "cuda"), the encoders
        cutting rows into forward passes by `batching`; returns the head."""
        self.model.to(device)
        self.device, self.batching, self._encoders = device, batching, None
        return self

    def embed_embeddings(self, x: np.ndarray | torch.Tensor | Inputs) -> np.ndarray:
        """The head's output for rows of concatenated embeddings (the cache's columns, in spec
        order; with trainable encoders, Inputs from `features`): a similarity head's embeddings
        (unit length when trained with normalize), a classifier's logits."""
        with torch.inference_mode():
            if not self.spec.trainable:
                x = torch.as_tensor(x, dtype=torch.float32, device=self.device)
                return self.model(x).float().cpu().numpy()
            if not isinstance(x, Inputs):
                raise RaycacheError(
                    f"this head trains encoders {list(self.spec.trainable)} with it, so it "
                    "needs their inputs, not embeddings alone; use predict / embed on raw "
                    "inputs (or pass Head.features(inputs))")
            parts = [self.model(x[i : i + LIVE_ROWS].to(self.device)).float().cpu()
                     for i in range(0, len(x), LIVE_ROWS)]
            return (torch.cat(parts) if parts else torch.empty(0, self.spec.width)).numpy()

    def embed(self, inputs: dict[str, list] | list) -> np.ndarray:
        """Head embeddings for raw inputs: runs the head's frozen encoders live, then the head
        (search with them: cosine or dot against a gallery embedded the same way)."""
        return self.embed_embeddings(self.features(inputs))

    @property
    def classes(self) -> list:
        """The label value of each class: its name for a named label, else its id."""
        return list(self.spec.class_names) or list(range(self.spec.num_classes))

    def predict_embeddings(self, x: np.ndarray | torch.Tensor) -> np.ndarray:
        """Classes for rows of concatenated embeddings (the cache's columns, in spec order), in
        the label's own values: names for a named label, else ids."""
        return self.named(self.predict_ids(x))

    def named(self, ids: np.ndarray) -> np.ndarray:
        """Class ids as the label's values (names for a named label; ids unchanged)."""
        if not self.spec.class_names:
            return ids
        return np.asarray(self.spec.class_names, dtype=object)[ids]

    def predict_ids(self, x: np.ndarray | torch.Tensor) -> np.ndarray:
        """Class ids (0..K-1) for rows of concatenated embeddings; `classes` names them."""
        return self.logits(x).argmax(1)

    def predict_proba(self, inputs: dict[str, list] | list) -> np.ndarray:
        """Each class's probability (softmax) for raw inputs, columns in `classes` order."""
        z = self.logits(self.features(inputs))
        z = np.exp(z - z.max(axis=1, keepdims=True))
        return z / z.sum(axis=1, keepdims=True)

    def logits(self, x: np.ndarray | torch.Tensor | Inputs) -> np.ndarray:
        """A classifier's logits for rows of concatenated embeddings."""
        if self.spec.objective != "classification":
            raise RaycacheError(
                f"this head was trained with objective {self.spec.objective!r}: it maps rows to "
                f"{self.spec.width}-d embeddings and has no classes to predict; use "
                "Head.embed / embed_embeddings, and compare embeddings (nearest neighbours)")
        return self.embed_embeddings(x)

    def predict(self, inputs: dict[str, list] | list) -> np.ndarray:
        """Classes for raw inputs, in the label's own values (names for a named label, else
        ids): runs the head's frozen encoders live, then the head.

        `inputs` maps each encoder's input column to values; a plain list is enough when the
        head uses one encoder.
        """
        return self.predict_embeddings(self.features(inputs))

    def features(self, inputs: dict[str, list] | list) -> np.ndarray | Inputs:
        """Raw inputs through the head's frozen encoders (weights checked against the ones the
        head was trained on): the concatenated embeddings the head reads; with trainable
        encoders, Inputs: those embeddings and the trainable encoders' prepared inputs."""
        configs = self.encoder_configs()
        if not isinstance(inputs, dict):
            if len(configs) != 1:
                raise RaycacheError(f"this head uses {len(configs)} encoders; pass a dict of "
                                    f"columns {[c.input for c in configs]}")
            inputs = {configs[0].input: list(inputs)}
        from raycache._encoders import ENCODERS

        return self.features_prepared([ENCODERS[c.kind].prepare(c)(pa.array(inputs[c.input]))
                                       for c in configs])

    def features_prepared(self, prepared: list[pa.Array]) -> np.ndarray | Inputs:
        """`features` from inputs already prepared (tokenised) by each encoder's CPU stage,
        one array per encoder in spec order: what a pipeline's model stage runs."""
        by_name = dict(zip(self.spec.encoders, prepared, strict=True))
        feats = [enc.forward(by_name[name])
                 for enc, name in zip(self.encoders(), self.spec.frozen, strict=True)]
        n = len(prepared[0]) if prepared else 0
        x = np.concatenate(feats, axis=1) if feats else np.empty((n, 0), np.float32)
        if not self.spec.trainable:
            return x
        from raycache._encoders import ENCODERS

        live = {}
        for name in self.spec.trainable:
            cfg = encoder_config(self.spec, name)
            live[name] = torch.from_numpy(ENCODERS[cfg.kind].rows(cfg, by_name[name]))
        return Inputs(torch.from_numpy(np.asarray(x, np.float32)), live)

    def encoders(self) -> list:
        """The frozen encoders (spec.frozen), loaded once on the head's device, their weights
        checked against the ones the head was trained on; trainable ones are in the model."""
        if self._encoders is None:
            from raycache._encoders import ENCODERS

            configs = [c for c in self.encoder_configs() if c.name not in self.spec.trainable]
            loaded = [ENCODERS[c.kind].load(c, self.device, self.batching or Batching())
                      for c in configs]
            for enc, c in zip(loaded, configs, strict=True):
                want, got = self.spec.weights_digests.get(c.name), enc.weights_digest()
                if want and got != want:
                    raise RaycacheError(
                        f"encoder {c.name!r} loads weights {got[:12]}, but the head was trained "
                        f"on embeddings of weights {want[:12]}; install the model the cache "
                        "was filled with, or retrain the head on a fill of this model")
            self._encoders = loaded
        return self._encoders

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
    `options` are fsspec storage options, e.g. client_kwargs, credentials plain or sealed:
    head.json records none, so they come from the caller or the environment)."""
    folder = Store(checkpoint, options)
    where = f"{checkpoint}/{HEAD_CONFIG}"
    try:
        text = folder.read_bytes(folder.path(HEAD_CONFIG))
        blob = folder.read_bytes(folder.path(HEAD_WEIGHTS))
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
        raise RaycacheError(f"{checkpoint!r} is not a head checkpoint ({exc}); pass a "
                            "checkpoint folder holding head.json and head.pt, e.g. "
                            "TrainResult.checkpoint") from exc
    try:
        saved = json.loads(text)
        spec = HeadSpec.from_dict(saved["head"], where)
        model = build_model(spec)
        model.load_state_dict(torch.load(io.BytesIO(blob), map_location="cpu"))
    except (ValueError, KeyError, TypeError, RuntimeError, EOFError, pickle.UnpicklingError
            ) as exc:
        raise RaycacheError(f"checkpoint {checkpoint!r} is unreadable ({type(exc).__name__}: "
                            f"{exc}); its head.json and head.pt must be the ones a training "
                            "run wrote: point at a complete checkpoint_* folder") from exc
    model.eval()
    return Head(model, spec, {k: v for k, v in saved.items() if k != "head"})

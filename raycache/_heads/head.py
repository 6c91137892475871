"""A trained head in use: predict from raw inputs (running its frozen encoders live, and its
trained ones inside the model) or from embeddings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from raycache._core.trust import Trust
from raycache._encoders.batching import Batching
from raycache._encoders.config import EncoderConfig
from raycache._encoders.trusted import check_encoders
from raycache._errors import RaycacheError
from raycache._heads.joint import Inputs, encoder_config
from raycache._heads.specs import HEAD_CONFIG, HeadSpec

__all__ = ["LIVE_ROWS", "Head"]

LIVE_ROWS = 256
"""Rows per forward pass of a head with trainable encoders (they run inside the model)."""


@dataclass
class Head:
    """A trained head (from `load_head`), with the spec it was built from (encoders, label).

    Example:
        ```python
        head = raycache.load_head(run.checkpoint).to("cuda")
        head.predict(["Return the cosine of x."])        # the label's values
        head.predict_proba(["Return the cosine of x."])  # columns in head.classes order
        ```
    """

    model: torch.nn.Module
    """The head's torch module (with trainable encoders: them and the head), in eval mode."""
    spec: HeadSpec
    """What the head was built from: its family, encoders, label and classes."""
    info: dict[str, Any] = field(default_factory=dict, repr=False)
    """head.json's metrics, best epoch and history (and the cache's key column)."""
    device: str = "cpu"
    """Where the head and its encoders run (see `to`)."""
    batching: Batching | None = field(default=None, repr=False)
    """How the encoders cut rows into forward passes (None: their default)."""
    _encoders: list | None = field(default=None, repr=False)
    _trust: bool | tuple[str, ...] = field(default=False, repr=False)  # load_head's trust_code

    @property
    def key(self) -> str | None:
        """The key column of the cache the head was trained on (None for older checkpoints)."""
        return self.info.get("key")

    def to(self, device: str, batching: Batching | None = None) -> Head:
        """Run the head and its frozen encoders on `device`.

        Args:
            device: A torch device: "cpu", "cuda", "cuda:1".
            batching: How the encoders cut rows into forward passes (None: their default).

        Returns:
            This head, moved (the encoders are loaded again on the new device when next used).

        Example:
            ```python
            head = raycache.load_head(run.checkpoint).to("cuda")
            ```
        """
        self.model.to(device)
        self.device, self.batching, self._encoders = device, batching, None
        return self

    def embed_embeddings(self, x: np.ndarray | torch.Tensor | Inputs,
                         layer: str = "output") -> np.ndarray:
        """The head's output (or its penultimate layer's) for rows of concatenated embeddings.

        Args:
            x: Rows of the cache's embedding columns concatenated in spec order, shape
                (rows, in_dim); with trainable encoders, the Inputs `features` returns.
            layer: "output", or "penultimate": what the layers before the last Linear make of
                `x` (an mlp's last hidden layer; a linear head's standardised inputs).

        Returns:
            A similarity head's embeddings (unit length when trained with normalize), or a
            classifier's logits: shape (rows, spec.width); the penultimate layer's vectors.

        Raises:
            RaycacheError: The head trains encoders with it and `x` is embeddings alone; a
                layer that is neither, or a head that has no penultimate layer (gated, skip).

        Example:
            ```python
            out = head.embed_embeddings(cache.to_numpy("minilm"))
            ```
        """
        model = self.model if layer == "output" else self.penultimate(layer)
        with torch.inference_mode():
            if not self.spec.trainable:
                x = torch.as_tensor(x, dtype=torch.float32, device=self.device)
                return model(x).float().cpu().numpy()
            if not isinstance(x, Inputs):
                raise RaycacheError(
                    f"this head trains encoders {list(self.spec.trainable)} with it, so it "
                    "needs their inputs, not embeddings alone; use predict / embed on raw "
                    "inputs (or pass Head.features(inputs))")
            parts = [self.model(x[i : i + LIVE_ROWS].to(self.device)).float().cpu()
                     for i in range(0, len(x), LIVE_ROWS)]
            return (torch.cat(parts) if parts else torch.empty(0, self.spec.width)).numpy()

    def penultimate(self, layer: str = "penultimate") -> torch.nn.Module:
        """The head's layers before its output layer (`embed_embeddings(x, "penultimate")`).

        Args:
            layer: "penultimate" (anything else is refused, naming the layers there are).

        Returns:
            A module: rows of concatenated embeddings in, the penultimate layer's vectors out.

        Raises:
            RaycacheError: `layer` is not "penultimate", or the head has no such layers.
        """
        from raycache._heads.layers import penultimate

        found = penultimate(self.model) if layer == "penultimate" else None
        if found is None:
            why = (f"layer={layer!r} is not a layer; expected output or penultimate"
                   if layer != "penultimate" else f"head family {self.spec.head!r} is no chain "
                   "of layers ending in a Linear, so it has no penultimate layer")
            raise RaycacheError(f"{why}; export or serve its output layer")
        return found

    def embed(self, inputs: dict[str, list] | list) -> np.ndarray:
        """Head embeddings for raw inputs: runs the head's frozen encoders live, then the head.

        Args:
            inputs: Each encoder's input column mapped to its values; a plain list when the
                head uses one encoder.

        Returns:
            One embedding per input, shape (rows, spec.width): compare them by cosine or dot
            product against a gallery embedded the same way.

        Raises:
            RaycacheError: A list for a head of several encoders, or its encoders cannot be
                built as recorded (see `features`).
            EncoderError: An encoder cannot be loaded, or cannot read an input.

        Example:
            ```python
            gallery = head.embed(documents)
            scores = head.embed(["how do I sort a list"]) @ gallery.T
            ```
        """
        return self.embed_embeddings(self.features(inputs))

    @property
    def classes(self) -> list:
        """The label value of each class: its name for a named label, else its id."""
        return list(self.spec.class_names) or list(range(self.spec.num_classes))

    def predict_embeddings(self, x: np.ndarray | torch.Tensor) -> np.ndarray:
        """Classes for rows of concatenated embeddings, in the label's own values.

        Args:
            x: Rows of the cache's embedding columns concatenated in spec order.

        Returns:
            One class per row: its name for a named label, else its id.

        Raises:
            RaycacheError: The head is not a classifier, or it trains encoders with it (it
                needs raw inputs).

        Example:
            ```python
            head.predict_embeddings(cache.to_numpy("minilm"))
            ```
        """
        return self.named(self.predict_ids(x))

    def named(self, ids: np.ndarray) -> np.ndarray:
        """Class ids as the label's values.

        Args:
            ids: Class ids (0..K-1).

        Returns:
            The classes' names for a named label; the ids unchanged otherwise.
        """
        if not self.spec.class_names:
            return ids
        return np.asarray(self.spec.class_names, dtype=object)[ids]

    def predict_ids(self, x: np.ndarray | torch.Tensor) -> np.ndarray:
        """Class ids (0..K-1) for rows of concatenated embeddings; `classes` names them.

        Args:
            x: Rows of the cache's embedding columns concatenated in spec order.

        Returns:
            One class id per row.

        Raises:
            RaycacheError: The head is not a classifier, or it needs raw inputs.
        """
        return self.logits(x).argmax(1)

    def predict_proba(self, inputs: dict[str, list] | list) -> np.ndarray:
        """Each class's probability (softmax) for raw inputs.

        Args:
            inputs: Each encoder's input column mapped to its values; a plain list when the
                head uses one encoder.

        Returns:
            Shape (rows, classes), columns in `classes` order.

        Raises:
            RaycacheError: The head is not a classifier, or its encoders cannot be built as
                recorded (see `features`).
            EncoderError: An encoder cannot be loaded, or cannot read an input.

        Example:
            ```python
            proba = head.predict_proba(["Return the cosine of x."])
            ```
        """
        z = self.logits(self.features(inputs))
        z = np.exp(z - z.max(axis=1, keepdims=True))
        return z / z.sum(axis=1, keepdims=True)

    def logits(self, x: np.ndarray | torch.Tensor | Inputs) -> np.ndarray:
        """A classifier's logits for rows of concatenated embeddings.

        Args:
            x: Rows of the cache's embedding columns concatenated in spec order; with
                trainable encoders, the Inputs `features` returns.

        Returns:
            Shape (rows, classes), columns in `classes` order.

        Raises:
            RaycacheError: The head was trained for similarity (it has no classes).
        """
        if self.spec.objective != "classification":
            raise RaycacheError(
                f"this head was trained with objective {self.spec.objective!r}: it maps rows to "
                f"{self.spec.width}-d embeddings and has no classes to predict; use "
                "Head.embed / embed_embeddings, and compare embeddings (nearest neighbours)")
        return self.embed_embeddings(x)

    def predict(self, inputs: dict[str, list] | list) -> np.ndarray:
        """Classes for raw inputs: runs the head's frozen encoders live, then the head.

        Args:
            inputs: Each encoder's input column mapped to its values; a plain list when the
                head uses one encoder.

        Returns:
            One class per input: its name for a named label, else its id.

        Raises:
            RaycacheError: The head is not a classifier, or its encoders cannot be built as
                recorded (see `features`).
            EncoderError: An encoder cannot be loaded, or cannot read an input.

        Example:
            ```python
            head.predict({"text": ["Return the cosine of x.", "Open a file."]})
            ```
        """
        return self.predict_embeddings(self.features(inputs))

    def features(self, inputs: dict[str, list] | list) -> np.ndarray | Inputs:
        """Raw inputs through the head's frozen encoders (their weights checked): what it reads.

        Args:
            inputs: Each encoder's input column mapped to its values; a plain list when the
                head uses one encoder.

        Returns:
            The concatenated embeddings, shape (rows, in_dim); with trainable encoders,
            Inputs: those embeddings and the trainable encoders' prepared inputs.

        Raises:
            RaycacheError: A list for a head of several encoders, an encoder missing from
                head.json, or one whose weights differ from the ones it was trained on.
            EncoderError: An encoder cannot be loaded, or cannot read an input.

        Example:
            ```python
            x = head.features(["Return the cosine of x."])
            head.predict_embeddings(x)
            ```
        """
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
        """`features` from inputs prepared (tokenised) by each encoder's CPU stage (pipelines).

        Args:
            prepared: One array per encoder, in spec order, as the encoder's prepare step
                returns it.

        Returns:
            As `features`.

        Raises:
            RaycacheError: An encoder missing from head.json, or one whose weights differ
                from the ones the head was trained on.
            EncoderError: An encoder cannot be loaded.
        """
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
        """The frozen encoders (spec.frozen), loaded once on the head's device, weights checked.

        Returns:
            The loaded encoders, in spec order (trainable ones are in the model).

        Raises:
            RaycacheError: An encoder missing from head.json, or one whose weights differ
                from the ones the head was trained on.
            EncoderError: An encoder cannot be loaded (its model is not installed).
        """
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
        """The encoders' fill configs, as recorded in head.json.

        Returns:
            One EncoderConfig per encoder of the spec, in its order.

        Raises:
            RaycacheError: head.json does not record an encoder (a cache filled by an older
                raycache: fill it again and retrain).
            UntrustedCode: An encoder's code (a torch factory) is not trusted (load_head).
        """
        missing = [e for e in self.spec.encoders if e not in self.spec.encoder_configs]
        if missing:
            raise RaycacheError(f"head.json does not record how to build encoders {missing}; "
                                "the cache was filled by an older raycache: fill it again and "
                                "retrain to predict from raw inputs (predict_embeddings works)")
        configs = {e: EncoderConfig(**self.spec.encoder_configs[e]) for e in self.spec.encoders}
        check_encoders(configs, Trust.of(self._trust), f"{HEAD_CONFIG}: head.encoder_configs")
        return list(configs.values())

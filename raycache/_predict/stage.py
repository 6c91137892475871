"""The predict pipeline's model stage: a Ray Data actor that loads a trained Head once and turns
batches of prepared (tokenised) inputs into prediction or embedding columns."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from raycache._cache.columns import input_column
from raycache._compute.actor import start_actor
from raycache._compute.prepare import prepared
from raycache._errors import EncoderError, RaycacheError
from raycache._source.files import META

if TYPE_CHECKING:
    from raycache._compute.pool import Pool
    from raycache._heads.joint import Inputs
    from raycache._heads.loaded import Head

__all__ = ["EMBEDDING", "OUTPUTS", "PREDICTION", "PREDICTION_ID", "PROBABILITIES", "PredictActor",
           "head_columns", "output_fields"]

PREDICTION = "prediction"
"""A classifier's class, in the cache's label values: its name for a named label, else its id."""
PREDICTION_ID = "prediction_id"
"""A classifier on a named label: the class id (0..K-1, the place of its name in the head's
class_names)."""
PROBABILITIES = "probabilities"
"""A classifier's softmax over its classes, a fixed-size list of float32."""
EMBEDDING = "embedding"
"""A similarity head's embedding, a fixed-size list of float32."""
OUTPUTS = (PREDICTION, PREDICTION_ID, PROBABILITIES, EMBEDDING)


def _vectors(x: np.ndarray) -> pa.FixedSizeListArray:
    flat = pa.array(np.ascontiguousarray(x, np.float32).reshape(-1), pa.float32())
    return pa.FixedSizeListArray.from_arrays(flat, x.shape[1])


def output_fields(head: Head) -> list[pa.Field]:
    """The columns a head adds: prediction and probabilities, or embedding."""
    vector = pa.list_(pa.float32(), head.spec.width)
    if head.spec.objective == "classification" and head.spec.class_names:
        return [pa.field(PREDICTION, pa.string()), pa.field(PREDICTION_ID, pa.int64()),
                pa.field(PROBABILITIES, vector)]
    if head.spec.objective == "classification":
        return [pa.field(PREDICTION, pa.int64()), pa.field(PROBABILITIES, vector)]
    return [pa.field(EMBEDDING, vector)]


def head_columns(head: Head, features: np.ndarray | Inputs) -> dict[str, pa.Array]:
    """The head's output columns for rows of concatenated frozen-encoder embeddings (with
    trainable encoders, Inputs)."""
    out = head.embed_embeddings(features)
    if head.spec.objective != "classification":
        return {EMBEDDING: _vectors(out)}
    z = np.exp(out - out.max(axis=1, keepdims=True))
    probs = z / z.sum(axis=1, keepdims=True)
    ids = out.argmax(axis=1)
    if head.spec.class_names:
        return {PREDICTION: pa.array(head.named(ids), pa.string()),
                PREDICTION_ID: pa.array(ids, pa.int64()), PROBABILITIES: _vectors(probs)}
    return {PREDICTION: pa.array(ids, pa.int64()), PROBABILITIES: _vectors(probs)}


class PredictActor:
    """Ray Data actor (or a plain callable, in-process): loads the head and its frozen encoders
    once, on the pool's device; each call maps prepared inputs to the passthrough columns plus the
    head's output columns."""

    def __init__(self, checkpoint: str, options: dict[str, Any], pool: Pool,
                 trust_code: bool | tuple[str, ...] = False):
        from raycache._heads.loaded import load_head

        start_actor(pool, "predict")
        self.head = load_head(checkpoint, trust_code=trust_code, **options).to(pool.device,
                                                                                pool.batching)
        self.configs = self.head.encoder_configs()
        self.head.encoders()  # load (and check) the encoders now, not on the first batch

    def __call__(self, table: pa.Table) -> pa.Table:
        columns = [input_column(c.name) if c.trainable else prepared(c) for c in self.configs]
        inputs = [table.column(c) for c in columns]
        drop = {*META, *columns}
        out = table.drop_columns([c for c in table.column_names if c in drop])
        try:
            features = self.head.features_prepared(inputs)
        except RaycacheError:
            raise
        except Exception as exc:  # the encoder's own (torch, tokenizer) errors
            given = {c.input: str(x.type) for c, x in zip(self.configs, inputs, strict=True)}
            raise EncoderError(
                f"the head's encoders failed on input columns {given} ({type(exc).__name__}: "
                f"{exc}); each input column must hold what the cache was filled from "
                "(the same type and shape)") from exc
        for name, column in head_columns(self.head, features).items():
            out = out.append_column(name, column)
        return out

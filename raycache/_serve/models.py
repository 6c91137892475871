"""The models a served head answers `/v1/embeddings` and `/embed` for, by name: the head itself
(a similarity head's embeddings, a classifier's penultimate layer) and each frozen text encoder
(its embeddings, as the cache holds them); their vectors for a batch of queries, with the
tokens they read (no Ray)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raycache._errors import RaycacheError

if TYPE_CHECKING:
    from raycache._heads.head import Head
    from raycache._serve.requests import Query

__all__ = ["Models"]


class Models:
    """The head's models by name: `columns` (the input column each reads), `default` (the
    head's name where the head gives vectors of one text, else the first encoder's)."""

    def __init__(self, head: Head, name: str):
        from raycache._encoders import ENCODERS

        self.head = head
        spec = head.spec
        self.configs = {c.name: c for c in head.encoder_configs()}
        self.prepare = {n: ENCODERS[c.kind].prepare(c) for n, c in self.configs.items()}
        texts = {n: c for n, c in self.configs.items() if c.kind == "hf-text"}
        self.columns: dict[str, str] = {n: c.input for n, c in texts.items()
                                        if n in spec.frozen}
        self.layer = "output" if spec.objective != "classification" else "penultimate"
        self.why, self.head_model = "", None
        try:
            if self.layer == "penultimate":
                head.penultimate()
            if len(self.configs) != 1 or not texts:
                raise RaycacheError(f"this head reads {len(self.configs)} inputs "
                                    f"{sorted(c.input for c in self.configs.values())}, not "
                                    "one text")
            self.columns = {**self.columns, name: next(iter(texts.values())).input}
            self.head_model = name
        except RaycacheError as exc:
            self.why = f"model: the head gives no vectors of one text here ({exc})"
        self.default = name if name in self.columns else next(iter(self.columns), name)
        self._dims: dict[str, int] = {}

    def vectors(self, model: str, queries: list[Query]) -> list[dict[str, Any]]:
        """Each query's vectors of `model` and the tokens its texts were cut to."""
        column = self.columns[model]
        values = pa.array([v for q in queries for v in q.columns[column]])
        if model == self.head_model:
            (only,) = self.configs
            prepared = self.prepare[only](values)
            x = self.head.features_prepared([prepared])
            vecs = self.head.embed_embeddings(x, self.layer)
        else:
            prepared = self.prepare[model](values)
            vecs = self.head.encoders()[self.head.spec.frozen.index(model)].forward(prepared)
        tokens = _tokens(prepared, len(values))
        out, start = [], 0
        for q in queries:
            end = start + q.rows
            out.append({"vectors": np.asarray(vecs[start:end]),
                        "tokens": int(tokens[start:end].sum())})
            start = end
        return out

    def dims(self) -> dict[str, int]:
        """Each model's vector size (measured once, on one text)."""
        from raycache._serve.requests import Query

        for model, column in self.columns.items():
            if model not in self._dims:
                got = self.vectors(model, [Query({column: ["dims"]}, model=model)])
                self._dims[model] = int(got[0]["vectors"].shape[1])
        return dict(self._dims)

    def listed(self) -> dict[str, Any]:
        """OpenAI's `GET /v1/models` list."""
        return {"object": "list", "data": [{"id": m, "object": "model", "created": 0,
                                            "owned_by": "raycache"} for m in self.columns]}


def _tokens(prepared: pa.Array | pa.ChunkedArray, rows: int) -> np.ndarray:
    """Each row's tokens where the encoder prepared token ids (a list per row), else 0s."""
    if isinstance(prepared, pa.ChunkedArray):
        prepared = prepared.combine_chunks()
    if pa.types.is_list(prepared.type) or pa.types.is_large_list(prepared.type):
        return pc.list_value_length(prepared).to_numpy(zero_copy_only=False)
    return np.zeros(rows, np.int64)

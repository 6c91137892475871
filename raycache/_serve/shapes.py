"""The request and response shapes other servers speak, read into a Query and written back:
OpenAI's `POST /v1/embeddings` and Text Embeddings Inference's `/embed` and `/predict`; a bad
request a BadRequest naming the field, as raycache's own shape (no Ray, no torch)."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np

from raycache._serve.requests import BadRequest, Limits, Query, parse

__all__ = ["ENCODINGS", "openai_error", "openai_query", "openai_reply", "tei_embed_query",
           "tei_embeddings", "tei_predict_query", "tei_predictions", "tei_shaped"]

ENCODINGS = ("float", "base64")
"""OpenAI's `encoding_format`s: a list of floats, or base64 of little-endian float32 bytes."""

OPENAI_FIELDS = frozenset({"input", "model", "encoding_format", "dimensions", "user"})
EMBED_FIELDS = frozenset({"inputs", "normalize", "truncate", "truncation_direction"})
PREDICT_FIELDS = frozenset({"inputs", "raw_scores", "truncate", "truncation_direction"})


def _object(body: bytes) -> dict[str, Any]:
    """The body as a JSON object, or the BadRequest raycache's own shape gives for it."""
    try:
        data = json.loads(body or b"null")
    except (RecursionError, ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(400, "body", f"body: not JSON ({type(exc).__name__}); send a JSON "
                                      "object with Content-Type: application/json") from exc
    if not isinstance(data, dict):
        raise BadRequest(422, "body", f"body: expected a JSON object, got {type(data).__name__}")
    return data


def _known(data: dict[str, Any], fields: frozenset[str], route: str) -> None:
    unknown = sorted(set(data) - fields)
    if unknown:
        raise BadRequest(422, unknown[0], f"{unknown[0]}: unknown field of {route}; expected "
                                          f"{sorted(fields)}")


def _texts(data: dict[str, Any], field: str, limits: Limits, column: str,
           model: str) -> tuple[Query, bool]:
    """`data[field]` (a string or a list of them) as a Query of `column`, through raycache's
    own checks (row count, characters, UTF-8); whether it came as one string."""
    if field not in data:
        raise BadRequest(422, field, f"{field}: missing; send a string or a list of strings")
    value = data[field]
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        raise BadRequest(422, field, f"{field}: token ids are not read here; send the texts "
                                     "themselves (the server tokenises them)")
    try:
        query = parse(json.dumps({"texts": value}).encode(), limits, (column,))
    except BadRequest as exc:  # raycache's checks, named as this shape names the field
        raise BadRequest(exc.status, exc.field.replace("texts", field, 1),
                         str(exc).replace("texts", field, 1)) from None
    truncated = tuple(t.replace("texts", field, 1) for t in query.truncated)
    return Query(query.columns, False, truncated, model), isinstance(value, str)


def openai_query(body: bytes, limits: Limits, models: dict[str, str],
                 default: str) -> tuple[Query, str, str]:
    """An OpenAI embeddings request: its Query, the model named (a key of `models`, whose value
    is the input column it reads), and the encoding format.

    Raises:
        BadRequest: A field missing, unknown or of the wrong type, an unknown model (404), or
            more inputs than the limits allow; each naming the field.
    """
    data = _object(body)
    _known(data, OPENAI_FIELDS, "/v1/embeddings")
    model = data.get("model", default)
    if not isinstance(model, str) or model not in models:
        raise BadRequest(404, "model", f"model: {model!r} is not served here; expected one of "
                                       f"{sorted(models)} (GET /v1/models lists them)")
    fmt = data.get("encoding_format", "float")
    if fmt not in ENCODINGS:
        raise BadRequest(422, "encoding_format", f"encoding_format: {fmt!r}; expected one of "
                                                 f"{list(ENCODINGS)}")
    dims = data.get("dimensions")
    if dims is not None and not isinstance(dims, int):
        raise BadRequest(422, "dimensions", f"dimensions: {dims!r}; expected a whole number")
    query, _ = _texts(data, "input", limits, models[model], model)
    return query, model, fmt


def openai_reply(vectors: np.ndarray, model: str, fmt: str, tokens: int) -> dict[str, Any]:
    """The OpenAI embeddings response: one `embedding` object per input, in order."""
    vectors = np.asarray(vectors, np.float32)
    if fmt == "base64":
        rows = [base64.b64encode(v.astype("<f4").tobytes()).decode() for v in vectors]
    else:
        rows = vectors.tolist()
    return {"object": "list", "model": model,
            "data": [{"object": "embedding", "index": i, "embedding": e}
                     for i, e in enumerate(rows)],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


def openai_error(exc: BadRequest) -> dict[str, Any]:
    """A BadRequest as OpenAI's error body (the openai client raises it by status)."""
    return {"error": {"message": str(exc), "type": "invalid_request_error",
                      "param": exc.field, "code": "model_not_found" if exc.status == 404
                      else None}}


def _flag(data: dict[str, Any], name: str, default: bool) -> bool:
    value = data.get(name, default)
    if not isinstance(value, bool):
        raise BadRequest(422, name, f"{name}: expected true or false, got {value!r}")
    return value


def tei_embed_query(body: bytes, limits: Limits, column: str, model: str
                    ) -> tuple[Query, bool]:
    """A TEI `/embed` request: its Query, and whether to L2-normalise (TEI's default: yes)."""
    data = _object(body)
    _known(data, EMBED_FIELDS, "/embed")
    normalize = _flag(data, "normalize", True)
    _flag(data, "truncate", True)  # texts are always cut to the encoder's max_length
    query, _ = _texts(data, "inputs", limits, column, model)
    return query, normalize


def tei_embeddings(vectors: np.ndarray, normalize: bool) -> list[list[float]]:
    """TEI's `/embed` response: one list of floats per input."""
    vectors = np.asarray(vectors, np.float32)
    if normalize:
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = vectors / np.where(norms == 0, 1, norms)
    return vectors.tolist()


def tei_shaped(body: bytes) -> bool:
    """Whether a `/predict` body is TEI's (`inputs` a string or a list of strings) rather than
    raycache's (`texts`, or `inputs` by column); a body that is no JSON object: raycache's
    (whose parse names the problem)."""
    try:
        data = json.loads(body or b"null")
    except (RecursionError, ValueError, UnicodeDecodeError):
        return False
    return (isinstance(data, dict) and "texts" not in data and "inputs" in data
            and not isinstance(data["inputs"], dict))


def tei_predict_query(body: bytes, limits: Limits, column: str) -> tuple[Query, bool]:
    """A TEI `/predict` request (`inputs` a string or a list of them): its Query (raycache's
    classifier answer), and whether it came as one string (answered as one list)."""
    data = _object(body)
    _known(data, PREDICT_FIELDS, "/predict")
    if _flag(data, "raw_scores", False):
        raise BadRequest(422, "raw_scores", "raw_scores: true is not served; scores are "
                                            "softmax probabilities (send raw_scores: false)")
    query, single = _texts(data, "inputs", limits, column, None)
    return query, single


def tei_predictions(answer: dict[str, Any], classes: list, single: bool) -> list:
    """TEI's `/predict` response from raycache's classifier answer: per input, every class as
    `{"label", "score"}`, the likeliest first; one input sent as a string: its list alone."""
    out = [[{"label": str(c), "score": float(p)} for p, c in
            sorted(zip(row, classes, strict=True), key=lambda pc: -pc[0])]
           for row in answer["probabilities"]]
    return out[0] if single else out

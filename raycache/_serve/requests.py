"""What a request to a served head may hold, read and checked before it reaches the model: a
bad one is a BadRequest with its HTTP status and the field it names (no Ray, no torch)."""

from __future__ import annotations

import json
from dataclasses import dataclass

__all__ = ["BadRequest", "Query", "parse"]


class BadRequest(ValueError):
    """A request refused: its HTTP status and a message naming the field."""

    def __init__(self, status: int, field: str, message: str):
        super().__init__(message)
        self.status, self.field = status, field

    def to_json(self) -> dict:
        return {"error": str(self), "field": self.field}


@dataclass(frozen=True)
class Query:
    """One request's inputs: the texts, and whether it asks for the embeddings too."""

    texts: list[str]
    embeddings: bool = False


def parse(body: bytes, max_texts: int) -> Query:
    """The Query in a request body: JSON `{"texts": [str, ...], "embeddings": bool}`.

    Raises:
        BadRequest: Not JSON (400), a field missing or of the wrong type (422), more than
            `max_texts` texts (413); each message names the field and what it expects.
    """
    try:
        data = json.loads(body or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(400, "body", f"body: not JSON ({exc}); send "
                                      '{"texts": ["..."]} with Content-Type: application/json'
                         ) from exc
    if not isinstance(data, dict):
        raise BadRequest(422, "body", f"body: expected a JSON object "
                                      f'{{"texts": [...]}}, got {type(data).__name__}')
    unknown = sorted(set(data) - {"texts", "embeddings"})
    if unknown:
        raise BadRequest(422, unknown[0], f"{unknown[0]}: unknown field; expected texts "
                                          "and optionally embeddings")
    texts = data.get("texts")
    if texts is None:
        raise BadRequest(422, "texts", 'texts: missing; send {"texts": ["..."]}')
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, list) or not texts:
        raise BadRequest(422, "texts", f"texts: expected a non-empty list of strings, got "
                                       f"{json.dumps(texts)[:80]}")
    bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
    if bad is not None:
        raise BadRequest(422, f"texts[{bad}]", f"texts[{bad}]: expected a string, got "
                                               f"{type(texts[bad]).__name__} "
                                               f"{json.dumps(texts[bad])[:80]}")
    if len(texts) > max_texts:
        raise BadRequest(413, "texts", f"texts: {len(texts)} inputs, more than max_texts="
                                       f"{max_texts}; split the request or raise max_texts")
    embeddings = data.get("embeddings", False)
    if not isinstance(embeddings, bool):
        raise BadRequest(422, "embeddings", f"embeddings: expected true or false, got "
                                            f"{json.dumps(embeddings)[:80]}")
    return Query(texts, embeddings)

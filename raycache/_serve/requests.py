"""What a request to a served head may hold, read and checked before it reaches the model: a
bad one is a BadRequest with its HTTP status and the field it names (no Ray, no torch)."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

__all__ = ["BadRequest", "Query", "parse"]

FIELDS = ("texts", "inputs", "embeddings")


class BadRequest(ValueError):
    """A request refused: its HTTP status and a message naming the field."""

    def __init__(self, status: int, field: str, message: str):
        super().__init__(message)
        self.status, self.field = status, field

    def to_json(self) -> dict:
        return {"error": str(self), "field": self.field}


@dataclass(frozen=True)
class Query:
    """One request's inputs, each encoder's input column to its values (all of one length),
    and whether it asks for the embeddings too."""

    columns: dict[str, list[str | bytes]]
    embeddings: bool = False

    @property
    def rows(self) -> int:
        return len(next(iter(self.columns.values())))


def parse(body: bytes, max_texts: int, columns: tuple[str, ...] = ("text",),
          images: frozenset[str] = frozenset(), read_uris: bool = False) -> Query:
    """The Query in a request body: JSON `{"texts": [str, ...]}` for a head on one encoder, or
    `{"inputs": {column: [str, ...], ...}}` naming each encoder's input column; optionally
    `"embeddings": true`. An image is `{"base64": "..."}` or a `data:` URI (decoded here, to
    bytes); a path or URI the replica would read itself only with `read_uris`.

    Args:
        body: The request's body.
        max_texts: Rows one request may hold.
        columns: The head's encoders' input columns, in spec order.
        images: Which of `columns` hold images.
        read_uris: Whether an image may be a path or URI that the replica reads.

    Raises:
        BadRequest: Not JSON (400), a field missing or of the wrong type (422), more than
            `max_texts` rows (413); each message names the field and what it expects.
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
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise BadRequest(422, unknown[0], f"{unknown[0]}: unknown field; expected texts (or "
                                          "inputs) and optionally embeddings")
    if ("texts" in data) == ("inputs" in data):
        field = "texts" if len(columns) == 1 else "inputs"
        raise BadRequest(422, field, f"{field}: send exactly one of texts (a list of strings, "
                                     f"for a head on one encoder) or inputs (columns "
                                     f"{list(columns)}, each a list)")
    got = data.get("inputs") if "inputs" in data else data["texts"]
    if "texts" in data or not isinstance(got, dict):
        name = "texts" if "texts" in data else "inputs"
        if len(columns) != 1:
            raise BadRequest(422, name, f"{name}: this head reads {len(columns)} columns; send "
                                        f'{{"inputs": {{{", ".join(map(json.dumps, columns))}'
                                        f": [...]}}}}")
        got = {columns[0]: _values(got, name, columns[0] in images, read_uris)}
    else:
        missing = [c for c in columns if c not in got]
        extra = sorted(set(got) - set(columns))
        if missing or extra:
            field = f"inputs.{(missing or extra)[0]}"
            raise BadRequest(422, field, f"{field}: {'missing' if missing else 'not read'}; "
                                         f"this head reads columns {list(columns)}")
        got = {c: _values(got[c], f"inputs.{c}", c in images, read_uris) for c in columns}
        lengths = {len(v) for v in got.values()}
        if len(lengths) > 1:
            raise BadRequest(422, "inputs", f"inputs: columns of different lengths "
                                            f"{ {c: len(v) for c, v in got.items()} }; send "
                                            "one value per row in every column")
    query = Query(got, data.get("embeddings", False))
    if query.rows > max_texts:
        field = "texts" if "texts" in data else "inputs"
        raise BadRequest(413, field, f"{field}: {query.rows} inputs, more than max_texts="
                                     f"{max_texts}; split the request or raise max_texts")
    if not isinstance(query.embeddings, bool):
        raise BadRequest(422, "embeddings", f"embeddings: expected true or false, got "
                                            f"{json.dumps(query.embeddings)[:80]}")
    return query


def _values(values: object, field: str, image: bool, read_uris: bool) -> list[str | bytes]:
    """A column's values: strings, or for an image column each image's bytes (or its path or
    URI where `read_uris`)."""
    if not image:
        return _strings(values, field)
    if isinstance(values, str | dict):
        values = [values]
    if not isinstance(values, list) or not values:
        raise BadRequest(422, field, f"{field}: expected a non-empty list of images, each "
                                     '{"base64": "..."} or a data: URI')
    return [_image(v, f"{field}[{i}]", read_uris) for i, v in enumerate(values)]


def _image(value: object, field: str, read_uris: bool) -> str | bytes:
    """One image's encoded bytes from `{"base64": ...}` or a data: URI; a path or URI as it is
    where the replica may read it."""
    if isinstance(value, dict) and set(value) == {"base64"} and isinstance(value["base64"], str):
        text = value["base64"]
    elif isinstance(value, str) and value.startswith("data:"):
        head, _, text = value.partition(",")
        if not head.endswith(";base64"):
            raise BadRequest(422, field, f"{field}: a data: URI without ;base64 (got "
                                         f"{head[:40]!r}); send data:image/png;base64,<bytes>")
    elif isinstance(value, str) and read_uris:
        return value
    else:
        what = "a path or URI" if isinstance(value, str) else json.dumps(value)[:80]
        fix = "" if not isinstance(value, str) else (" (this server reads no paths or URIs of "
                                                     "its own; serve with read_uris: true)")
        raise BadRequest(422, field, f"{field}: expected an image as {{\"base64\": \"...\"}} "
                                     f"or a data: URI, got {what}{fix}")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise BadRequest(422, field, f"{field}: not base64 ({exc}); send the image file's "
                                     "bytes base64-encoded") from exc


def _strings(values: object, field: str) -> list[str]:
    """A non-empty list of strings (a lone string as a list of one), or BadRequest naming it."""
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, list) or not values:
        raise BadRequest(422, field, f"{field}: expected a non-empty list of strings, got "
                                     f"{json.dumps(values)[:80]}")
    bad = next((i for i, t in enumerate(values) if not isinstance(t, str)), None)
    if bad is not None:
        raise BadRequest(422, f"{field}[{bad}]", f"{field}[{bad}]: expected a string, got "
                                                 f"{type(values[bad]).__name__} "
                                                 f"{json.dumps(values[bad])[:80]}")
    return values

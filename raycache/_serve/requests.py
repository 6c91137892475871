"""What a request to a served head may hold, read and checked before it reaches the model: a
bad one is a BadRequest with its HTTP status and the field it names; its body read no further
than the size limit, its texts cut to the character cap, its images' sizes read from their
headers before any pixel is decoded (no Ray, no torch)."""

from __future__ import annotations

import base64
import binascii
import io
import json
from dataclasses import dataclass
from typing import Any

__all__ = ["BadRequest", "Limits", "Query", "parse", "read_body", "readable"]

FIELDS = ("texts", "inputs", "embeddings")


def readable(text: str) -> str:
    """`text` as valid UTF-8: a lone surrogate (which no response can encode) as its escape."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class BadRequest(ValueError):
    """A request refused: its HTTP status and a message naming the field."""

    def __init__(self, status: int, field: str, message: str):
        super().__init__(message)
        self.status, self.field = status, field

    def to_json(self) -> dict:
        return {"error": readable(str(self)), "field": readable(self.field)}


@dataclass(frozen=True)
class Limits:
    """What one request may hold: ServeConfig's limits, which hold their defaults."""

    max_texts: int
    max_chars: int
    max_image_pixels: int
    max_request_pixels: int
    max_body_bytes: int


@dataclass(frozen=True)
class Query:
    """One request's inputs, each encoder's input column to its values (all of one length),
    whether it asks for the embeddings too, the texts cut to the character cap, and the vectors
    it asks for by model name (None: raycache's own answer)."""

    columns: dict[str, list[str | bytes]]
    embeddings: bool = False
    truncated: tuple[str, ...] = ()
    model: str | None = None

    @property
    def rows(self) -> int:
        return len(next(iter(self.columns.values())))


async def read_body(request: Any, limit: int) -> bytes:
    """A request's body, refused (413) once it says or proves to be over `limit` bytes: by its
    Content-Length before a byte is read, else by counting while reading (a chunked body).

    Raises:
        BadRequest: Over `limit` (413), or a Content-Length that is no number (400).
    """
    length = request.headers.get("content-length")
    fix = "send fewer or smaller inputs per request, or serve with a larger max_body_bytes"
    if length is not None:
        if not length.strip().isdigit():
            raise BadRequest(400, "body", f"body: Content-Length {readable(length)[:40]!r} is "
                                          "not a number of bytes")
        if int(length) > limit:
            raise BadRequest(413, "body", f"body: {int(length)} bytes (its Content-Length), more "
                                          f"than max_body_bytes={limit}; {fix}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BadRequest(413, "body", f"body: more than max_body_bytes={limit} bytes "
                                          f"({size} read when it was cut off); {fix}")
        chunks.append(chunk)
    return b"".join(chunks)


def parse(body: bytes, limits: Limits, columns: tuple[str, ...] = ("text",),
          images: frozenset[str] = frozenset(), read_uris: bool = False) -> Query:
    """The Query in a request body: JSON `{"texts": [str, ...]}` for a head on one encoder, or
    `{"inputs": {column: [str, ...], ...}}` naming each encoder's input column; optionally
    `"embeddings": true`. An image is `{"base64": "..."}` or a `data:` URI (decoded here, to
    bytes); a path or URI the replica would read itself only with `read_uris`. A text longer
    than `limits.max_chars` is cut to it (named in `Query.truncated`), as an encoder truncates
    its tokens.

    Args:
        body: The request's body.
        limits: What one request may hold (rows, characters, pixels).
        columns: The head's encoders' input columns, in spec order.
        images: Which of `columns` hold images.
        read_uris: Whether an image may be a path or URI that the replica reads.

    Raises:
        BadRequest: Not JSON or nested too deep (400); a field missing or of the wrong type,
            or a text that is not valid UTF-8 (422); more than `max_texts` rows or more pixels
            than the limits allow (413); each message names the field and what it expects.
    """
    try:
        data = json.loads(body or b"null")
    except RecursionError as exc:
        raise BadRequest(400, "body", "body: JSON nested too deep to read (a request nests 4 "
                                      'levels at most: {"inputs": {"image": [{"base64": '
                                      '"..."}]}})') from exc
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
    field = "texts" if "texts" in data else "inputs"
    if "texts" in data or not isinstance(got, dict):
        if len(columns) != 1:
            raise BadRequest(422, field, f"{field}: this head reads {len(columns)} columns; "
                                         f'send {{"inputs": {{'
                                         f'{", ".join(map(json.dumps, columns))}: [...]}}}}')
        fields = {columns[0]: field}
        got = {columns[0]: got}
    else:
        missing = [c for c in columns if c not in got]
        extra = sorted(set(got) - set(columns))
        if missing or extra:
            name = f"inputs.{(missing or extra)[0]}"
            raise BadRequest(422, name, f"{name}: {'missing' if missing else 'not read'}; "
                                        f"this head reads columns {list(columns)}")
        fields = {c: f"inputs.{c}" for c in columns}
    for c in columns:  # the row count first: no more than max_texts values are read further
        n = len(got[c]) if isinstance(got[c], list) else 1
        if n > limits.max_texts:
            raise BadRequest(413, fields[c], f"{fields[c]}: {n} inputs, more than max_texts="
                                             f"{limits.max_texts}; split the request or raise "
                                             "max_texts")
    truncated: list[str] = []
    spent = [0]  # the request's pixels
    got = {c: (_images(got[c], fields[c], read_uris, limits, spent) if c in images
               else _strings(got[c], fields[c], limits.max_chars, truncated)) for c in columns}
    lengths = {len(v) for v in got.values()}
    if len(lengths) > 1:
        raise BadRequest(422, "inputs", f"inputs: columns of different lengths "
                                        f"{ {c: len(v) for c, v in got.items()} }; send "
                                        "one value per row in every column")
    query = Query(got, data.get("embeddings", False), tuple(truncated))
    if not isinstance(query.embeddings, bool):
        raise BadRequest(422, "embeddings", f"embeddings: expected true or false, got "
                                            f"{_shown(query.embeddings)}")
    return query


def _images(values: object, field: str, read_uris: bool, limits: Limits,
            spent: list[int]) -> list[str | bytes]:
    """An image column's values: each image's bytes (or its path or URI where `read_uris`), none
    over max_image_pixels, and the request's (`spent` counts them) not over max_request_pixels."""
    if isinstance(values, str | dict):
        values = [values]
    if not isinstance(values, list) or not values:
        raise BadRequest(422, field, f"{field}: expected a non-empty list of images, each "
                                     '{"base64": "..."} or a data: URI')
    out = []
    for i, value in enumerate(values):
        out.append(_image(value, f"{field}[{i}]", read_uris))
        if isinstance(out[-1], bytes):
            spent[0] += _pixels(out[-1], f"{field}[{i}]", limits.max_image_pixels)
            if spent[0] > limits.max_request_pixels:
                raise BadRequest(413, field, f"{field}: more than max_request_pixels="
                                             f"{limits.max_request_pixels} pixels in one request "
                                             f"({spent[0]} by {field}[{i}]); send fewer or "
                                             "smaller images per request")
    return out


def _pixels(data: bytes, field: str, limit: int) -> int:
    """An encoded image's pixels, read from its header (Pillow's open decodes none), refused
    over `limit`; 0 for bytes Pillow cannot identify (the encoder refuses those, naming them)."""
    try:
        from PIL import Image
    except ImportError:  # hf-image says Pillow is missing
        return 0
    over = (f"more than max_image_pixels={limit}; send it smaller (the encoder resizes it to "
            "its own input size anyway)")
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise BadRequest(413, field, f"{field}: an image of {over} (Pillow: {exc})") from exc
    except Exception:  # noqa: BLE001 - not an image Pillow reads: the encoder refuses it
        return 0
    if width * height > limit:
        raise BadRequest(413, field, f"{field}: {width}x{height} = {width * height} pixels, "
                                     f"{over}")
    return width * height


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
        what = "a path or URI" if isinstance(value, str) else _shown(value)
        fix = "" if not isinstance(value, str) else (" (this server reads no paths or URIs of "
                                                     "its own; serve with read_uris: true)")
        raise BadRequest(422, field, f"{field}: expected an image as {{\"base64\": \"...\"}} "
                                     f"or a data: URI, got {what}{fix}")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise BadRequest(422, field, f"{field}: not base64 ({exc}); send the image file's "
                                     "bytes base64-encoded") from exc


def _strings(values: object, field: str, max_chars: int, truncated: list[str]) -> list[str]:
    """A non-empty list of UTF-8 strings (a lone string as a list of one), each cut to
    `max_chars` (its field added to `truncated`), or BadRequest naming the bad one."""
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, list) or not values:
        raise BadRequest(422, field, f"{field}: expected a non-empty list of strings, got "
                                     f"{_shown(values)}")
    out = []
    for i, text in enumerate(values):
        name = f"{field}[{i}]"
        if not isinstance(text, str):
            raise BadRequest(422, name, f"{name}: expected a string, got "
                                        f"{type(text).__name__} {_shown(text)}")
        if len(text) > max_chars:
            text = text[:max_chars]
            truncated.append(name)
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise BadRequest(422, name, f"{name}: not valid UTF-8 text (a lone surrogate "
                                            f"{text[exc.start]!r} at character {exc.start}); "
                                            "send UTF-8, a surrogate only as half of a pair"
                                 ) from exc
        out.append(text)
    return out


def _shown(value: object) -> str:
    """A value as a short JSON excerpt; a list or object by its size alone (never walked)."""
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return f"an object of {len(value)} keys"
    return json.dumps(value[:80] if isinstance(value, str) else value)[:80]

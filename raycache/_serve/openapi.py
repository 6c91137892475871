"""The served head's OpenAPI schema (`GET /openapi.json`) and its Swagger UI page (`GET /docs`):
every route, its request body and its answers, with the route prefix the application is served
under (no Ray)."""

from __future__ import annotations

from typing import Any

__all__ = ["docs_page", "schema"]

_TEXTS = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
_ERROR = {"type": "object", "properties": {"error": {}, "field": {"type": "string"}}}
_VECTORS = {"type": "array", "items": {"type": "array", "items": {"type": "number"}}}


def _body(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": {
        "type": "object", "properties": properties, "required": required,
        "additionalProperties": False}}}}


def _answers(ok: dict[str, Any], what: str) -> dict[str, Any]:
    error = {"content": {"application/json": {"schema": _ERROR}}}
    return {"200": {"description": what, "content": {"application/json": {"schema": ok}}},
            "400": {"description": "the body is not JSON", **error},
            "404": {"description": "no such route (or model)", **error},
            "413": {"description": "over a limit (max_texts, max_body_bytes, pixels)", **error},
            "422": {"description": "a field missing or of the wrong type, named", **error}}


def _get(what: str, ok: dict[str, Any] | None = None,
         kind: str = "application/json") -> dict[str, Any]:
    content = {kind: {"schema": ok or {"type": "object"}}}
    return {"get": {"summary": what, "responses": {"200": {"description": what,
                                                           "content": content}}}}


def schema(prefix: str, title: str, version: str) -> dict[str, Any]:
    """The OpenAPI 3.1 document of a head served under `prefix` ("" for the root)."""
    native = _body({"texts": {"type": "array", "items": {"type": "string"}},
                    "inputs": {"type": "object", "description": "each encoder's input column "
                               "to its values, for a head of several encoders"},
                    "embeddings": {"type": "boolean"}}, [])
    native_ok = {"type": "object", "properties": {
        "labels": {"type": "array"}, "probabilities": _VECTORS, "embeddings": _VECTORS,
        "truncated": {"type": "array", "items": {"type": "string"}}}}
    openai = _body({"input": _TEXTS, "model": {"type": "string"},
                    "encoding_format": {"enum": ["float", "base64"]},
                    "dimensions": {"type": "integer"}, "user": {"type": "string"}}, ["input"])
    openai_ok = {"type": "object", "properties": {
        "object": {"const": "list"}, "model": {"type": "string"},
        "data": {"type": "array", "items": {"type": "object", "properties": {
            "object": {"const": "embedding"}, "index": {"type": "integer"},
            "embedding": {"oneOf": [{"type": "array", "items": {"type": "number"}},
                                    {"type": "string", "contentEncoding": "base64"}]}}}},
        "usage": {"type": "object", "properties": {"prompt_tokens": {"type": "integer"},
                                                   "total_tokens": {"type": "integer"}}}}}
    embed = _body({"inputs": _TEXTS, "normalize": {"type": "boolean"},
                   "truncate": {"type": "boolean"}, "truncation_direction": {"type": "string"}},
                  ["inputs"])
    scores = {"type": "array", "items": {"type": "object", "properties": {
        "label": {"type": "string"}, "score": {"type": "number"}}}}
    predict = _body({"inputs": _TEXTS, "raw_scores": {"type": "boolean"},
                     "truncate": {"type": "boolean"},
                     "truncation_direction": {"type": "string"}}, ["inputs"])
    post = {
        "/": ("raycache's answer: labels and probabilities (a classifier) or embeddings",
              native, native_ok),
        "/predict": ("TEI's /predict: every class with its score, likeliest first (raycache's "
                     "body, texts or inputs by column, gets raycache's answer)", predict,
                     {"oneOf": [scores, {"type": "array", "items": scores}]}),
        "/embed": ("TEI's /embed: one vector per input", embed, _VECTORS),
        "/v1/embeddings": ("OpenAI's embeddings: `model` names the head or an encoder",
                           openai, openai_ok),
    }
    paths: dict[str, Any] = {
        prefix + route: {"post": {"summary": what, "requestBody": body,
                                  "responses": _answers(ok, what)}}
        for route, (what, body, ok) in post.items()}
    paths.update({
        prefix + "/info": _get("the model's id, dims, classes and batching"),
        prefix + "/v1/models": _get("the models /v1/embeddings serves (OpenAI's list)"),
        prefix + "/health": _get("ok while the replica serves"),
        prefix + "/metadata": _get("the checkpoint, classes, limits, what was served"),
        prefix + "/metrics": _get("Prometheus' text format", {"type": "string"}, "text/plain"),
    })
    return {"openapi": "3.1.0", "info": {"title": title, "version": version}, "paths": paths}


def docs_page(schema_url: str, title: str) -> str:
    """The Swagger UI page of the schema at `schema_url` (FastAPI's, as Serve's own ingress
    gives it)."""
    from fastapi.openapi.docs import get_swagger_ui_html

    return bytes(get_swagger_ui_html(openapi_url=schema_url, title=title).body).decode()

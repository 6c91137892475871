"""The Ray Serve application of a head (each replica: the frozen encoders and the head, loaded
once): POST texts (or each encoder's input column), labels by name and probabilities back, or
vectors in OpenAI's and TEI's shapes (`shapes`); concurrent requests merged into one forward
pass by `@serve.batch`, run off the event loop, its size and wait retuned by `reconfigure`; a
request that fails, fails alone; GET health, metadata, info, metrics, the OpenAPI schema.
Imports neither Ray Data nor Ray Train."""

from __future__ import annotations

import asyncio
import time
import warnings
from dataclasses import asdict, replace
from typing import Any

import numpy as np
from ray import serve

from raycache._errors import BadInput, ConfigError
from raycache._serve import shapes
from raycache._serve.requests import BadRequest, Limits, Query, parse, read_body, readable

__all__ = ["HeadServer"]

HEALTH = "health"
METADATA = "metadata"
GETS = frozenset({HEALTH, METADATA, "info", "metrics", "docs", "openapi.json", "v1/models"})
POSTS = frozenset({"", "predict", "embed", "v1/embeddings"})
TUNED = ("max_batch_size", "batch_wait_timeout_s")
"""What `reconfigure` (a deployment's user_config) retunes without a restart, besides the
request limits."""


class HeadServer:
    """One replica: a loaded head on its device, and counts of what it served (metadata)."""

    def __init__(self, checkpoint: str, options: dict[str, Any] | None = None,
                 device: str = "cpu", max_batch_size: int = 32,
                 batch_wait_timeout_s: float = 0.01, limits: Limits | None = None,
                 route_prefix: str = "/", read_uris: bool = False,
                 trust_code: bool | tuple[str, ...] = False, model: str = ""):
        from raycache._heads.loaded import load_head
        from raycache._serve.metrics import Metrics

        self.head = load_head(checkpoint, trust_code=trust_code, **(options or {})).to(device)
        self.head.encoders()  # loaded (and their weights checked) before the first request
        if limits is None:
            from raycache._serve import config

            limits = config.limits(config.ServeConfig(checkpoint))
        self.limits, self.prefix = limits, route_prefix.rstrip("/")
        configs = self.head.encoder_configs()
        self.columns = tuple(c.input for c in configs)
        self.images = frozenset(c.input for c in configs if c.kind == "hf-image")
        if self.images:  # an image the replica reads by URI: Pillow refuses it over the limit
            from PIL import Image

            Image.MAX_IMAGE_PIXELS = limits.max_image_pixels
            warnings.simplefilter("error", Image.DecompressionBombWarning)
        self.read_uris = read_uris
        self.checkpoint = checkpoint
        self.tuned = {"max_batch_size": max_batch_size,
                      "batch_wait_timeout_s": batch_wait_timeout_s}
        self.batched.set_max_batch_size(max_batch_size)
        self.batched.set_batch_wait_timeout_s(batch_wait_timeout_s)
        self.served = {"requests": 0, "batches": 0, "largest_batch": 0, "refused": 0}
        self.metrics = Metrics()
        from raycache._serve.models import Models

        self.models = Models(self.head, model or self._named()[1] or self._named()[0])
        self.models.dims()  # measured now, not on the event loop at the first GET /info

    def reconfigure(self, user_config: dict[str, Any]) -> None:
        """A deployment's `user_config` applied (Serve calls this at start and on each change):
        `max_batch_size` and `batch_wait_timeout_s` of `@serve.batch`, and the request limits.

        Raises:
            ConfigError: A key that is not one of those, or a bad value; each named.
        """
        from raycache._core.config import load
        from raycache._serve.config import LIMITS, ServeConfig

        if not isinstance(user_config, dict):
            raise ConfigError([f"user_config={user_config!r}: expected a mapping of "
                               f"{[*TUNED, *LIMITS]}"])
        unknown = sorted(set(user_config) - {*TUNED, *LIMITS})
        if unknown:
            raise ConfigError([f"user_config.{k}: not retuned without a restart; expected "
                               f"one of {[*TUNED, *LIMITS]} (set the others in the "
                               "application's args)" for k in unknown])
        now = {**self.tuned, **asdict(self.limits), **user_config}
        cfg = load(ServeConfig, {"checkpoint": self.checkpoint, **now})
        self.tuned = {k: getattr(cfg, k) for k in TUNED}
        self.limits = replace(self.limits, **{k: getattr(cfg, k) for k in LIMITS})
        self.batched.set_max_batch_size(cfg.max_batch_size)
        self.batched.set_batch_wait_timeout_s(cfg.batch_wait_timeout_s)

    async def __call__(self, request: Any) -> Any:
        started = time.perf_counter()
        route = request.url.path[len(self.prefix):].strip("/")
        response = await self.route(request, route)
        known = route if route in GETS | POSTS else "other"
        self.metrics.answered("/" + known, response.status_code, time.perf_counter() - started)
        return response

    async def route(self, request: Any, route: str) -> Any:
        """The answer to one request on `route` (the path after the prefix)."""
        from starlette.responses import HTMLResponse, JSONResponse, Response

        if request.method == "GET" and route in GETS:
            if route == "metrics":
                from raycache._serve.metrics import CONTENT_TYPE

                return Response(self.metrics.text(), media_type=CONTENT_TYPE)
            if route == "docs":
                from raycache._serve.openapi import docs_page

                return HTMLResponse(docs_page(f"{self.prefix}/openapi.json", "raycache head"))
            return JSONResponse({HEALTH: lambda: {"status": "ok"}, METADATA: self.metadata,
                                 "info": self.info, "openapi.json": self.openapi,
                                 "v1/models": self.models.listed}[route]())
        if request.method != "POST" or route not in POSTS:
            return JSONResponse({"error": f"{request.method} /{route}: no such route; POST "
                                          f"{self.prefix}/ (texts), /v1/embeddings, /embed or "
                                          f"/predict; GET {self.prefix}/{HEALTH}, /info, "
                                          "/metrics or /docs", "field": "path"},
                                status_code=404)
        try:
            body = await read_body(request, self.limits.max_body_bytes)
            if route == "v1/embeddings":
                return await self.openai(body)
            if route == "embed":
                return await self.tei_embed(body)
            if route == "predict" and shapes.tei_shaped(body):
                return await self.tei_predict(body)
            query = await asyncio.to_thread(parse, body, self.limits, self.columns, self.images,
                                            self.read_uris)
            answer = await self.ask(query)
            if query.truncated:
                answer = {**answer, "truncated": list(query.truncated)}
            return JSONResponse(answer)
        except BadRequest as exc:
            self.served["refused"] += 1
            shaped = shapes.openai_error(exc) if route == "v1/embeddings" else exc.to_json()
            return JSONResponse(shaped, status_code=exc.status)
        except BadInput as exc:  # a value the encoder cannot read: an unreadable image
            self.served["refused"] += 1
            return JSONResponse({"error": readable(str(exc)),
                                 "field": readable(f"inputs.{exc.column}")}, status_code=422)
        except Exception as exc:  # noqa: BLE001 - one request's failure, never the replica's
            return JSONResponse({"error": readable(f"{type(exc).__name__}: {exc}"),
                                 "field": "inputs"}, status_code=500)

    async def ask(self, query: Query) -> dict[str, Any]:
        """`query` answered in a batch with the others waiting; its own failure raised."""
        answer = await self.batched(query)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def openai(self, body: bytes) -> Any:
        from starlette.responses import JSONResponse

        query, model, fmt = await asyncio.to_thread(
            shapes.openai_query, body, self.limits, self.models.columns, self.models.default)
        got = await self.ask(query)
        return JSONResponse(shapes.openai_reply(got["vectors"], model, fmt, got["tokens"]))

    async def tei_embed(self, body: bytes) -> Any:
        from starlette.responses import JSONResponse

        default = self.models.default
        if default not in self.models.columns:
            raise BadRequest(404, "model", self.models.why)
        query, normalize = await asyncio.to_thread(
            shapes.tei_embed_query, body, self.limits, self.models.columns[default], default)
        got = await self.ask(query)
        return JSONResponse(shapes.tei_embeddings(got["vectors"], normalize))

    async def tei_predict(self, body: bytes) -> Any:
        from starlette.responses import JSONResponse

        if self.head.spec.objective != "classification" or len(self.columns) != 1:
            raise BadRequest(422, "inputs", "inputs: this head has no classes to score on one "
                                            "text (a similarity head, or several encoders); "
                                            "POST /embed or /v1/embeddings for its vectors")
        query, single = await asyncio.to_thread(shapes.tei_predict_query, body, self.limits,
                                                self.columns[0])
        got = await self.ask(query)
        return JSONResponse(shapes.tei_predictions(got, self.head.classes, single))

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.01)
    async def batched(self, queries: list[Query]) -> list[dict[str, Any] | Exception]:
        """Every waiting request's rows in one forward pass, split back per request."""
        return await self.run_batch(queries)

    async def run_batch(self, queries: list[Query]) -> list[dict[str, Any] | Exception]:
        """`answer_each` in a worker thread, counted: the event loop meanwhile reads other
        requests and answers health and metadata."""
        self.served["requests"] += len(queries)
        self.served["batches"] += 1
        self.served["largest_batch"] = max(self.served["largest_batch"], len(queries))
        self.metrics.batch(len(queries))
        return await asyncio.to_thread(self.answer_each, queries)

    def answer_each(self, queries: list[Query]) -> list[dict[str, Any] | Exception]:
        """`answer` for all of `queries` at once; where that fails, for each alone, so that
        only the request that fails gets its exception (BadInput: an input the encoder cannot
        read) and the others their answers."""
        try:
            return self.answer(queries)
        except Exception as exc:  # noqa: BLE001 - answered request by request below
            if len(queries) == 1:
                return [exc]
        out: list[dict[str, Any] | Exception] = []
        for q in queries:
            try:
                out.extend(self.answer([q]))
            except Exception as exc:  # noqa: BLE001 - this request's failure alone
                out.append(exc)
        return out

    def answer(self, queries: list[Query]) -> list[dict[str, Any]]:
        """The answers to `queries`: raycache's own from one forward pass over all their rows,
        and the vectors of each model asked for from one pass per model."""
        out: list[dict[str, Any]] = [{} for _ in queries]
        for model in {q.model for q in queries}:
            at = [i for i, q in enumerate(queries) if q.model == model]
            some = [queries[i] for i in at]
            got = self.native(some) if model is None else self.models.vectors(model, some)
            for i, one in zip(at, got, strict=True):
                out[i] = one
        return out

    def native(self, queries: list[Query]) -> list[dict[str, Any]]:
        """raycache's own answers to `queries`, from one forward pass over all their rows."""
        x = self.head.features({c: [v for q in queries for v in q.columns[c]]
                                for c in self.columns})
        spec, out = self.head.spec, []
        if spec.objective == "classification":
            z = self.head.logits(x)
            labels = self.head.named(z.argmax(1))
            z = np.exp(z - z.max(axis=1, keepdims=True))
            proba = z / z.sum(axis=1, keepdims=True)
        else:
            vectors = self.head.embed_embeddings(x)
        start = 0
        for q in queries:
            end = start + q.rows
            if spec.objective == "classification":
                one = {"labels": np.asarray(labels[start:end]).tolist(),
                       "probabilities": proba[start:end].round(6).tolist()}
            else:
                one = {"embeddings": vectors[start:end].tolist()}
            if q.embeddings and isinstance(x, np.ndarray) and "embeddings" not in one:
                one["embeddings"] = np.asarray(x[start:end]).tolist()
            out.append(one)
            start = end
        return out

    def _named(self) -> tuple[str, str | None]:
        """The checkpoint's folder name and its run's (None outside a run's folder)."""
        parts = self.checkpoint.rstrip("/").split("/")
        return parts[-1], parts[-2] if len(parts) > 2 and parts[-3] == "runs" else None

    def metadata(self) -> dict[str, Any]:
        """The head's checkpoint by name (its run and cache version; never its path on the
        server), classes, encoders, limits, and what this replica has served."""
        spec = self.head.spec
        checkpoint, run = self._named()
        return {"checkpoint": checkpoint, "run": run, "cache": spec.cache,
                "fingerprint": spec.fingerprint, "objective": spec.objective,
                "label": spec.label, "head": spec.head,
                "classes": list(spec.class_names) or list(range(spec.num_classes)),
                "encoders": list(spec.encoders), "inputs": list(self.columns),
                "device": self.head.device, "limits": asdict(self.limits),
                "served": dict(self.served)}

    def info(self) -> dict[str, Any]:
        """TEI's /info: the model's id and type (a classifier's labels), each model's dims,
        and the batching and limits in force."""
        from raycache._core.version import package_version

        spec = self.head.spec
        kind = ({"classifier": {"id2label": {str(i): str(c) for i, c in
                                             enumerate(self.head.classes)}}}
                if spec.objective == "classification" else {"embedding": {}})
        return {"model_id": self.models.default, "model_type": kind,
                "dims": self.models.dims(), "fingerprint": spec.fingerprint,
                "max_client_batch_size": self.limits.max_texts,
                "max_batch_requests": self.tuned["max_batch_size"],
                "batch_wait_timeout_s": self.tuned["batch_wait_timeout_s"],
                "max_input_chars": self.limits.max_chars, "version": package_version()}

    def openapi(self) -> dict[str, Any]:
        """The OpenAPI schema of the routes under this application's prefix."""
        from raycache._core.version import package_version
        from raycache._serve.openapi import schema

        return schema(self.prefix, f"raycache head {self.models.default}", package_version())

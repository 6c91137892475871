"""The Ray Serve application of a head (each replica: the frozen encoders and the head, loaded
once): POST texts (or each encoder's input column), labels by name and probabilities back,
concurrent requests merged into one forward pass by `@serve.batch`, run off the event loop; a
request that fails, fails alone; GET health and metadata. Imports neither Ray Data nor Ray
Train."""

from __future__ import annotations

import asyncio
import warnings
from dataclasses import asdict
from typing import Any

import numpy as np
from ray import serve

from raycache._errors import BadInput
from raycache._serve.requests import BadRequest, Limits, Query, parse, read_body, readable

__all__ = ["HeadServer"]

HEALTH = "health"
METADATA = "metadata"


class HeadServer:
    """One replica: a loaded head on its device, and counts of what it served (metadata)."""

    def __init__(self, checkpoint: str, options: dict[str, Any] | None = None,
                 device: str = "cpu", max_batch_size: int = 32,
                 batch_wait_timeout_s: float = 0.01, limits: Limits | None = None,
                 route_prefix: str = "/", read_uris: bool = False,
                 trust_code: bool | tuple[str, ...] = False):
        from raycache._heads.loaded import load_head

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
        self.batched.set_max_batch_size(max_batch_size)
        self.batched.set_batch_wait_timeout_s(batch_wait_timeout_s)
        self.served = {"requests": 0, "batches": 0, "largest_batch": 0, "refused": 0}

    async def __call__(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        route = request.url.path[len(self.prefix):].strip("/")
        if request.method == "GET" and route == HEALTH:
            return JSONResponse({"status": "ok"})
        if request.method == "GET" and route == METADATA:
            return JSONResponse(self.metadata())
        if request.method != "POST" or route not in ("", "predict"):
            return JSONResponse({"error": f"{request.method} /{route}: no such route; POST "
                                          f"{self.prefix}/ (texts), GET {self.prefix}/{HEALTH} "
                                          f"or {self.prefix}/{METADATA}", "field": "path"},
                                status_code=404)
        try:
            body = await read_body(request, self.limits.max_body_bytes)
            query = await asyncio.to_thread(parse, body, self.limits, self.columns, self.images,
                                            self.read_uris)
            answer = await self.batched(query)
            if isinstance(answer, Exception):
                raise answer
            if query.truncated:
                answer = {**answer, "truncated": list(query.truncated)}
            return JSONResponse(answer)
        except BadRequest as exc:
            self.served["refused"] += 1
            return JSONResponse(exc.to_json(), status_code=exc.status)
        except BadInput as exc:  # a value the encoder cannot read: an unreadable image
            self.served["refused"] += 1
            return JSONResponse({"error": readable(str(exc)),
                                 "field": readable(f"inputs.{exc.column}")}, status_code=422)
        except Exception as exc:  # noqa: BLE001 - one request's failure, never the replica's
            return JSONResponse({"error": readable(f"{type(exc).__name__}: {exc}"),
                                 "field": "inputs"}, status_code=500)

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
        """The answers to `queries`, from one forward pass over all their rows."""
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

    def metadata(self) -> dict[str, Any]:
        """The head's checkpoint by name (its run and cache version; never its path on the
        server), classes, encoders, limits, and what this replica has served."""
        spec = self.head.spec
        parts = self.checkpoint.rstrip("/").split("/")
        run = parts[-2] if len(parts) > 2 and parts[-3] == "runs" else None
        return {"checkpoint": parts[-1], "run": run, "cache": spec.cache,
                "fingerprint": spec.fingerprint, "objective": spec.objective,
                "label": spec.label, "head": spec.head,
                "classes": list(spec.class_names) or list(range(spec.num_classes)),
                "encoders": list(spec.encoders), "inputs": list(self.columns),
                "device": self.head.device, "limits": asdict(self.limits),
                "served": dict(self.served)}


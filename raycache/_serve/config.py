"""SERVE's settings: the checkpoint, where the application listens, its batching, replicas and
their resources, what one request may hold (every problem named in one ConfigError by
`problems`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from raycache._core.config import AUTO
from raycache._core.trust import problems as trust_problems
from raycache._serve.requests import Limits

__all__ = ["LIMITS", "ServeConfig", "limits"]

LIMITS = ("max_texts", "max_chars", "max_image_pixels", "max_request_pixels", "max_body_bytes")
"""The fields that bound one request (see the serving guide's Limits)."""


@dataclass
class ServeConfig:
    """A head served over HTTP by Ray Serve: its frozen encoders and the head in each replica.

    `raycache.serve` takes this, or the same as a dict or a YAML file.

    Example:
        ```python
        cfg = raycache.ServeConfig(checkpoint=run.checkpoint, port=8000, max_batch_size=64)
        url = raycache.serve(cfg)   # POST {"texts": [...]} to it
        ```
    """

    checkpoint: str
    """A head checkpoint folder (TrainResult.checkpoint): a path or any fsspec URI."""
    name: str = "raycache"
    """The Serve application's name."""
    model: str = ""
    """The head's model name at `/v1/embeddings` and `/info` (empty: its run's name, else its
    checkpoint folder's); each frozen text encoder is a model by its own name."""
    route_prefix: str = "/"
    """Where the application's routes start (POST `<prefix>`, GET `<prefix>health`, ...)."""
    host: str = "127.0.0.1"
    """The address Serve's HTTP proxy listens on (0.0.0.0 to accept other machines)."""
    port: int = 8000
    """The port Serve's HTTP proxy listens on."""
    max_batch_size: int = 32
    """Requests merged into one forward pass at most (`@serve.batch`)."""
    batch_wait_timeout_s: float = 0.01
    """How long the first request of a batch waits for others to join it."""
    max_texts: int = 256
    """Inputs (rows) one request may hold (more: 413, naming the field)."""
    max_chars: int = 8192
    """Characters of one text: a longer one is cut to this before tokenising (as the encoder
    cuts its tokens at max_length), and the answer names it under `truncated`."""
    max_image_pixels: int = 16_777_216
    """Pixels (width x height) of one image, read from its header before it is decoded (more:
    413); also Pillow's decompression-bomb limit in the replica (4096 x 4096 by default)."""
    max_request_pixels: int = 67_108_864
    """Pixels of all the images of one request (more: 413)."""
    max_body_bytes: int = 16_777_216
    """Bytes of one request's body (16 MiB): a larger one is refused (413) before it is parsed,
    by its Content-Length or, for a chunked body, as soon as it is read past the limit."""
    num_replicas: int | str = 1
    """Replicas of the deployment; auto: Serve's autoscaling (see `autoscaling`)."""
    autoscaling: dict[str, Any] = field(default_factory=dict)
    """Serve's autoscaling_config, passed through (min_replicas, max_replicas,
    target_ongoing_requests, ...); used with num_replicas auto."""
    num_cpus: float = 1.0
    """CPUs each replica takes."""
    num_gpus: float | str = AUTO
    """GPUs each replica takes (auto: 1 where the cluster has GPUs, else 0); with a GPU, the
    encoders run on it in their compute dtype."""
    options: dict[str, Any] = field(default_factory=dict)
    """fsspec storage options for reading the checkpoint."""
    read_uris: bool = False
    """Let a request name an image by path or URI, which the replica then reads with its own
    credentials (off: images come in the request, base64 or as data: URIs)."""
    trust_code: bool | list[str] = False
    """Let the checkpoint's head.json name code to run (a head family or an encoder's factory,
    "module:function"): true for any, or a list of allowed prefixes ([mypkg.]); false: only
    registered kinds, and what this process's own configs named (raycache.load_head)."""

    def problems(self) -> list[str]:
        """Local checks, one line per problem (the field, the value, what is expected).

        Returns:
            The problems; empty when there are none.

        Example:
            ```python
            raycache.ServeConfig("ckpt", max_batch_size=0).problems()
            ```
        """
        out = trust_problems(self.trust_code)
        if not self.route_prefix.startswith("/"):
            out.append(f"route_prefix={self.route_prefix!r}: expected a path starting with /")
        if not isinstance(self.port, int) or not 0 < self.port < 65536:
            out.append(f"port={self.port!r}: expected a whole number in 1..65535")
        for name in ("max_batch_size", *LIMITS):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                out.append(f"{name}={value!r}: expected a whole number >= 1")
        if not isinstance(self.batch_wait_timeout_s, int | float) or self.batch_wait_timeout_s < 0:
            out.append(f"batch_wait_timeout_s={self.batch_wait_timeout_s!r}: expected seconds "
                       ">= 0")
        if self.num_replicas != AUTO and (not isinstance(self.num_replicas, int)
                                          or self.num_replicas < 1):
            out.append(f"num_replicas={self.num_replicas!r}: expected a whole number >= 1 or "
                       "auto")
        if self.autoscaling and self.num_replicas != AUTO:
            out.append(f"autoscaling={self.autoscaling!r} with num_replicas="
                       f"{self.num_replicas!r}: set num_replicas: auto to autoscale")
        if not isinstance(self.num_cpus, int | float) or self.num_cpus < 0:
            out.append(f"num_cpus={self.num_cpus!r}: expected a number >= 0")
        if self.num_gpus != AUTO and (not isinstance(self.num_gpus, int | float)
                                      or self.num_gpus < 0):
            out.append(f"num_gpus={self.num_gpus!r}: expected a number >= 0 or auto")
        return out


def limits(cfg: ServeConfig) -> Limits:
    """What one request may hold under `cfg`, as the replica checks it."""
    return Limits(**{name: getattr(cfg, name) for name in LIMITS})

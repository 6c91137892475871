"""What a replica has served, in Prometheus' text format at `GET /metrics`: requests and
errors by route and status, batch sizes, and latency; one registry per replica (no Ray)."""

from __future__ import annotations

__all__ = ["CONTENT_TYPE", "Metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""Prometheus' text exposition format."""

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    """A replica's counters and histograms, in a registry of its own (prometheus_client, a
    dependency of Ray Serve)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry()
        self.requests = Counter("raycache_requests", "Requests answered, by route and status.",
                                ["route", "status"], registry=self.registry)
        self.errors = Counter("raycache_request_errors", "Requests answered with a 4xx or 5xx, "
                              "by route and status.", ["route", "status"], registry=self.registry)
        self.latency = Histogram("raycache_request_seconds", "Seconds from a request's arrival "
                                 "to its answer, by route.", ["route"], buckets=SECONDS,
                                 registry=self.registry)
        self.batches = Histogram("raycache_batch_size", "Requests merged into one forward pass.",
                                 buckets=BATCHES, registry=self.registry)

    def answered(self, route: str, status: int, seconds: float) -> None:
        """Count one request's answer."""
        self.requests.labels(route, str(status)).inc()
        if status >= 400:
            self.errors.labels(route, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def batch(self, size: int) -> None:
        """Count one forward pass of `size` requests."""
        self.batches.observe(size)

    def text(self) -> bytes:
        """Every metric in Prometheus' text format."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)

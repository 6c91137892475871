"""A fault-injecting HTTP proxy for tests: it stands between raycache and the moto S3 server on
127.0.0.1 and, at a fixed seed and rate, answers a request with S3's 503 SlowDown or 500
InternalError (their XML bodies), drops the connection (before the request reaches the server,
or after it did, its answer lost), or stalls before forwarding it."""

from __future__ import annotations

import http.client
import random
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

__all__ = ["FAULTS", "FaultProxy"]

FAULTS = ("slowdown", "internal", "drop", "drop_after", "stall")
"""What the proxy does to a faulted request (drawn uniformly among those enabled)."""

_XML = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}'
        '</Message><RequestId>fault-proxy</RequestId><HostId>fault-proxy</HostId></Error>')
_ANSWERS = {"slowdown": (503, "SlowDown", "Please reduce your request rate."),
            "internal": (500, "InternalError",
                         "We encountered an internal error. Please try again.")}
_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te",
        "trailer"}


def _body(req: BaseHTTPRequestHandler) -> bytes:
    """The request's body, sent whole (Content-Length) or in chunks."""
    if "chunked" not in (req.headers.get("Transfer-Encoding") or "").lower():
        length = int(req.headers.get("Content-Length") or 0)
        return req.rfile.read(length) if length else b""
    parts = []
    while size := int(req.rfile.readline().split(b";")[0].strip() or b"0", 16):
        parts.append(req.rfile.read(size))
        req.rfile.readline()
    while req.rfile.readline().strip():  # trailers
        pass
    return b"".join(parts)


class FaultProxy:
    """A proxy to `target` (http://host:port) on 127.0.0.1 at `url`; `rate` of the requests
    (0 to 1) get one of `faults`, drawn from a random.Random(`seed`) (the draws are fixed;
    which request meets which depends on the order requests arrive in). `counts` says what
    it did."""

    def __init__(self, target: str, rate: float = 0.0, seed: int = 0,
                 faults: tuple[str, ...] = FAULTS, stall_s: float = 2.0):
        self.target = urlsplit(target)
        self.rate, self.faults, self.stall_s = rate, faults, stall_s
        self.start_on: str | None = None
        self.rng, self.lock = random.Random(seed), threading.Lock()
        self.counts: Counter = Counter()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _any(self) -> None:
                proxy.handle(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FaultProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def set(self, rate: float, seed: int | None = None, start_on: str | None = None) -> None:
        """Change the fault rate (and restart the draws at `seed`); given `start_on`
        (".parquet.json"), from when a request whose path holds it has been answered (so the
        store surely holds what it wrote)."""
        with self.lock:
            self.rate, self.start_on = rate, start_on
            if seed is not None:
                self.rng = random.Random(seed)

    def draw(self) -> str | None:
        with self.lock:
            if self.start_on:
                self.counts["passed"] += 1
                return None
            fault = self.rng.choice(self.faults) if self.rng.random() < self.rate else None
            self.counts[fault or "passed"] += 1
            return fault

    def _seen(self, request: str, status: int) -> None:
        with self.lock:
            if self.start_on and self.start_on in request and status < 300:
                self.start_on = None

    def handle(self, req: BaseHTTPRequestHandler) -> None:
        body = _body(req)
        fault = self.draw()
        if fault == "drop":
            req.close_connection = True
            return
        if fault in _ANSWERS:
            status, code, message = _ANSWERS[fault]
            data = _XML.format(code=code, message=message).encode()
            req.send_response(status)
            req.send_header("Content-Type", "application/xml")
            req.send_header("Content-Length", str(len(data)))
            req.end_headers()
            if req.command != "HEAD":
                req.wfile.write(data)
            return
        if fault == "stall":
            time.sleep(self.stall_s)
        conn = http.client.HTTPConnection(self.target.hostname, self.target.port, timeout=60)
        try:
            headers = {k: v for k, v in req.headers.items() if k.lower() not in _HOP}
            conn.request(req.command, req.path, body=body, headers=headers)
            answer = conn.getresponse()
            data = answer.read()
        finally:
            conn.close()
        if fault == "drop_after":  # the server did it; its answer is lost
            req.close_connection = True
            return
        self._seen(f"{req.command} {req.path}", answer.status)
        req.send_response(answer.status, answer.reason)
        head = req.command == "HEAD"  # its Content-Length is the object's, with no body
        for k, v in answer.getheaders():
            if k.lower() not in _HOP and (head or k.lower() != "content-length"):
                req.send_header(k, v)
        if not head:
            req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        if req.command != "HEAD":
            req.wfile.write(data)

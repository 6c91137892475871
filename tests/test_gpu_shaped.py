"""The GPU-shaped fill run end to end without a GPU: a Ray cluster that advertises logical GPUs
(`ray.init(num_gpus=2)`), whole and fractional GPUs per actor, and the test-only switch that
runs the GPU actors' models on the CPU. Scheduling, pool sizing, block sizes and the
prepare/encode split, and the shards written on the model actors, all run as on a GPU node;
only CUDA itself is left out."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from toy_encoders import projection

from raycache._compute.model_actor import BLOCK_TIMES
from raycache._compute.pool import GPU_ON_CPU
from raycache._fill.plan import load_config, plan
from tests.conftest import separable, toy_fill

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

TESTS = Path(__file__).resolve().parent

DRIVER = """
import json, sys
import ray
import raycache
from raycache._cache.finding import ls
ray.init(num_cpus=4, num_gpus=2, include_dashboard=False, log_to_driver=False)
for cfg in json.loads(sys.argv[1]):
    try:
        result = raycache.fill(cfg)
    except Exception as exc:
        print(json.dumps({"name": cfg["name"], "error": type(exc).__name__, "message": str(exc),
                          "listed": [c.name for c in ls(cfg["store"]["uri"])]}))
        continue
    print(json.dumps({"name": cfg["name"], "pool": result.pool, "hit": result.hit,
                      "encoded": result.encoded_rows, "shards": result.cache.manifest.shard_count,
                      "gpus": ray.cluster_resources().get("GPU")}))
"""


def test_the_gpu_shaped_fill_runs_on_logical_gpus_with_models_on_the_cpu(tmp_path):
    """Whole and half GPUs a model actor, each writing its blocks' shards itself (its marks:
    records out, one forward at a time), the in-process fill's rows and shards; and a writer
    that cannot write failing the fill with the store's error and no manifest."""
    pq.write_table(separable(n=900), tmp_path / "a.parquet")
    store, times = str(tmp_path / "store"), tmp_path / "times"
    times.mkdir()
    configs = [toy_fill(str(tmp_path / "a.parquet"), store, name=f"gpu-{g}", num_gpus=g,
                        rows_per_shard=100, reuse=False) for g in (1, 0.5)]
    blocked = toy_fill(str(tmp_path / "a.parquet"), store, name="blocked", num_gpus=1,
                       rows_per_shard=300, reuse=False)
    folder = Path(plan(load_config(blocked)).dir)
    folder.mkdir(parents=True)
    (folder / "shards").write_text("a file where the shards' folder goes")  # every write fails
    env = {**os.environ, GPU_ON_CPU: "1", BLOCK_TIMES: str(times),
           "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", DRIVER, json.dumps([*configs, blocked])],
                          env=env, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    runs = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["name"] for r in runs] == ["gpu-1", "gpu-0.5", "blocked"]
    for run, gpus in zip(runs, ("1 GPU", "0.5 GPU"), strict=False):
        assert run["gpus"] == 2.0 and not run["hit"] and run["encoded"] == 900
        assert gpus in run["pool"], run["pool"]  # the actors asked Ray for GPUs
        assert run["shards"] == 9
    failed = runs[2]
    assert failed["error"] == "StoreError", failed
    assert "shards" in failed["message"] and "failed (FileExistsError" in failed["message"]
    assert "blocked" not in failed["listed"] and not (folder / "manifest.json").exists()

    import raycache

    source = pq.read_table(tmp_path / "a.parquet")
    want = projection(8, 16)(__import__("torch").from_numpy(
        np.stack(source.column("features").to_numpy(zero_copy_only=False)))).detach().numpy()
    local = raycache.fill(toy_fill(str(tmp_path / "a.parquet"), store, name="local",
                                   in_process=True, rows_per_shard=100, reuse=False))
    assert local.encoded_rows == 900
    tables = {n: raycache.open_cache(n, store).read_table().sort_by("id")
              for n in ("gpu-1", "gpu-0.5", "local")}
    shards = {n: sorted(s.path for s in raycache.open_cache(n, store).manifest.shards)
              for n in tables}
    for name in ("gpu-1", "gpu-0.5"):
        table = tables[name]
        got = dict(zip(table.column("id").to_pylist(),
                       np.stack(table.column("proj").to_numpy(zero_copy_only=False)),
                       strict=True))
        np.testing.assert_allclose(np.stack([got[k] for k in source.column("id").to_pylist()]),
                                   want, atol=1e-6)
        for column in ("id", "label", "name"):  # the in-process fill's rows, exactly
            assert table.column(column).equals(tables["local"].column(column)), column
        np.testing.assert_allclose(np.stack(table.column("proj").to_numpy(False)),
                                   np.stack(tables["local"].column("proj").to_numpy(False)),
                                   atol=1e-6)
        assert shards[name] == shards["local"]  # the same shards, named by the same rows

    blocks = [json.loads(line) for f in times.glob("model-*.jsonl")
              for line in f.read_text().splitlines()]
    assert sum(b["rows"] for b in blocks if "exit" in b) >= 2 * 900
    for b in blocks:  # what the model stage returned: records, far from 16 float32s a row
        assert b["out_bytes"] < b["rows"] * 16 * 4 / 2, b
        assert b["enter"] <= b["device"] <= b["copied"] <= b["exit"]
    for f in times.glob("model-*.jsonl"):  # one forward at a time in each actor
        held = sorted((b["device"], b["copied"]) for b in map(json.loads,
                                                              f.read_text().splitlines()))
        assert all(a[1] <= b[0] for a, b in zip(held, held[1:], strict=False)), held


def test_the_switch_is_what_moves_a_gpu_pool_to_the_cpu(monkeypatch):
    from raycache._compute.pool import Pool
    from raycache._encoders.batching import Batching

    pool = Pool(actors=1, cpus=1.0, gpus=0.5, threads=1, batching=Batching(), prepare_cpus=1.0,
                prepare_actors=1)
    monkeypatch.delenv(GPU_ON_CPU, raising=False)
    assert pool.device == "cuda"
    monkeypatch.setenv(GPU_ON_CPU, "1")
    assert pool.device == "cpu"

"""The GPU-shaped fill run end to end without a GPU: a Ray cluster that advertises logical GPUs
(`ray.init(num_gpus=2)`), whole and fractional GPUs per actor, and the test-only switch that
runs the GPU actors' models on the CPU. Scheduling, pool sizing, block sizes and the
prepare/encode split all run as on a GPU node; only CUDA itself is left out."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from toy_encoders import projection

from raycache._compute.pool import GPU_ON_CPU
from tests.conftest import separable, toy_fill

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

TESTS = Path(__file__).resolve().parent

DRIVER = """
import json, sys
import ray
import raycache
from raycache._cache.finding import open_cache
ray.init(num_cpus=4, num_gpus=2, include_dashboard=False, log_to_driver=False)
for cfg in json.loads(sys.argv[1]):
    result = raycache.fill(cfg)
    print(json.dumps({"name": cfg["name"], "pool": result.pool, "hit": result.hit,
                      "encoded": result.encoded_rows, "shards": result.cache.manifest.shard_count,
                      "gpus": ray.cluster_resources().get("GPU")}))
"""


def test_the_gpu_shaped_fill_runs_on_logical_gpus_with_models_on_the_cpu(tmp_path):
    pq.write_table(separable(n=900), tmp_path / "a.parquet")
    configs = [toy_fill(str(tmp_path / "a.parquet"), str(tmp_path / "store"), name=f"gpu-{g}",
                        num_gpus=g, rows_per_shard=100, reuse=False) for g in (1, 0.5)]
    env = {**os.environ, GPU_ON_CPU: "1",
           "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(configs)], env=env,
                          capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    runs = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["name"] for r in runs] == ["gpu-1", "gpu-0.5"]
    for run, gpus in zip(runs, ("1 GPU", "0.5 GPU"), strict=True):
        assert run["gpus"] == 2.0 and not run["hit"] and run["encoded"] == 900
        assert gpus in run["pool"], run["pool"]  # the actors asked Ray for GPUs
        assert run["shards"] == 9

    import raycache

    source = pq.read_table(tmp_path / "a.parquet")
    want = projection(8, 16)(__import__("torch").from_numpy(
        np.stack(source.column("features").to_numpy(zero_copy_only=False)))).detach().numpy()
    for name in ("gpu-1", "gpu-0.5"):
        table = raycache.open_cache(name, str(tmp_path / "store")).read_table()
        got = dict(zip(table.column("id").to_pylist(),
                       np.stack(table.column("proj").to_numpy(zero_copy_only=False)),
                       strict=True))
        np.testing.assert_allclose(np.stack([got[k] for k in source.column("id").to_pylist()]),
                                   want, atol=1e-6)


def test_the_switch_is_what_moves_a_gpu_pool_to_the_cpu(monkeypatch):
    from raycache._compute.pool import Pool
    from raycache._encoders.batching import Batching

    pool = Pool(actors=1, cpus=1.0, gpus=0.5, threads=1, batching=Batching(), prepare_cpus=1.0,
                prepare_actors=1)
    monkeypatch.delenv(GPU_ON_CPU, raising=False)
    assert pool.device == "cuda"
    monkeypatch.setenv(GPU_ON_CPU, "1")
    assert pool.device == "cpu"

"""Rows a fill cannot cache (non-finite embeddings after the storage cast, unreadable inputs):
by default an EncoderError that names the encoder, the rows and the cause, nothing committed;
with on_bad_rows: skip, the rest committed, the skipped rows listed and retried later."""

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import toy_encoders

import raycache
from raycache import ConfigError, EncoderError
from raycache._cli import main
from raycache._upkeep.verify import verify
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(300)


def overflow_fill(source: str, store: str, **over) -> dict:
    cfg = toy_fill(source, store, in_process=True, **over)
    cfg["encoders"][0].update(factory="toy_encoders:scaled_projection", dtype="float16",
                              kwargs={"in_dim": 8, "out_dim": 16, "scale": 1e6})
    return cfg


def nan_fill(source: str, store: str, **over) -> dict:
    cfg = toy_fill(source, store, **{"in_process": True, **over})
    cfg["encoders"][0].update(factory="toy_encoders:nan_projection",
                              kwargs={"in_dim": 8, "out_dim": 16, "above": 0.3})
    return cfg


@pytest.fixture
def source(tmp_path) -> Path:
    pq.write_table(separable(n=300), tmp_path / "a.parquet")
    return tmp_path / "a.parquet"


def poisoned(source: Path) -> list[str]:
    """Keys of the rows nan_projection makes NaN."""
    table = pq.read_table(source)
    first = np.stack(table.column("features").to_numpy(zero_copy_only=False))[:, 0]
    keys = [k for k, f in zip(table.column("id").to_pylist(), first, strict=True) if f > 0.3]
    assert 0 < len(keys) < table.num_rows
    return keys


def test_a_float16_overflow_fails_the_fill_naming_the_cause(tmp_path, source):
    with pytest.raises(EncoderError) as err:
        raycache.fill(overflow_fill(str(source), str(tmp_path / "store")))
    message = str(err.value)
    assert "encoder 'proj' gave non-finite outputs" in message
    assert "row-00000" in message and "a.parquet" in message
    assert "float16 overflow" in message and "dtype: float32" in message
    assert "on_bad_rows: skip" in message
    assert not list((tmp_path / "store").rglob("manifest.json"))


def test_float32_storage_of_the_same_encoder_is_finite(tmp_path, source):
    cfg = overflow_fill(str(source), str(tmp_path / "store"))
    cfg["encoders"][0]["dtype"] = "float32"
    table = raycache.fill(cfg).cache.read_table()
    assert np.isfinite(np.stack(table.column("proj").to_numpy(zero_copy_only=False))).all()


def test_nan_outputs_fail_the_fill_naming_rows_and_keys(tmp_path, source):
    keys = poisoned(source)
    with pytest.raises(EncoderError) as err:
        raycache.fill(nan_fill(str(source), str(tmp_path / "store"), rows_per_shard=300))
    message = str(err.value)
    assert f"for {len(keys)} of 300 rows" in message and repr(keys[0]) in message
    assert "returned NaN or inf" in message
    assert not list((tmp_path / "store").rglob("manifest.json"))


def test_skip_commits_the_rest_lists_the_skipped_and_a_later_fill_retries_them(
        tmp_path, source, monkeypatch, capsys):
    keys = poisoned(source)
    store = str(tmp_path / "store")
    result = raycache.fill(nan_fill(str(source), store, on_bad_rows="skip"))
    m = result.cache.manifest
    assert sorted(s.key for s in m.skipped) == sorted(keys)
    assert all("non-finite" in s.reason and s.source.endswith("a.parquet") for s in m.skipped)
    assert m.rows == 300 - len(keys) and f"SKIPPED {len(keys)} row(s)" in result.summary()
    table = result.cache.read_table()
    assert set(table.column("id").to_pylist()).isdisjoint(keys)
    assert np.isfinite(np.stack(table.column("proj").to_numpy(zero_copy_only=False))).all()
    assert sum(m.label_stats["label"]["counts"]) == 300 - len(keys)
    report = verify(result.cache)
    assert report.ok and len(report.skipped) == len(keys)
    assert any(line.startswith(f"SKIPPED: {len(keys)} source row(s)") for line in report.lines())
    assert main(["ls", "--store", store]) == 0
    assert f"rows={300 - len(keys)}  skipped={len(keys)}" in capsys.readouterr().out
    assert main(["inspect", "toy", "--store", store]) == 0
    shown = capsys.readouterr().out
    assert f"skipped      {len(keys)} source row(s)" in shown and f"id={keys[0]!r}" in shown

    again = raycache.fill(nan_fill(str(source), store, on_bad_rows="skip"))  # still bad
    assert not again.hit and again.retried == len(keys) and len(again.cache.manifest.skipped) \
        == len(keys)

    monkeypatch.setattr(toy_encoders, "POISON", False)  # the cause fixed: the retry fills them
    fixed = raycache.fill(nan_fill(str(source), store, on_bad_rows="skip"))
    assert fixed.retried == len(keys) and fixed.encoded_rows == len(keys)
    assert not fixed.cache.manifest.skipped and fixed.cache.manifest.rows == 300
    assert sum(fixed.cache.manifest.label_stats["label"]["counts"]) == 300
    assert sorted(fixed.cache.read_table().column("id").to_pylist()) == \
        sorted(pq.read_table(source).column("id").to_pylist())
    assert raycache.fill(nan_fill(str(source), store, on_bad_rows="skip")).hit


def test_on_bad_rows_takes_error_or_skip(tmp_path, source):
    with pytest.raises(ConfigError, match="on_bad_rows='drop'.*'error'.*'skip'"):
        raycache.fill(nan_fill(str(source), str(tmp_path / "s"), on_bad_rows="drop"))


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_on_ray_the_same_error_and_the_same_skipped_rows(tmp_path, source, ray_session):
    keys = poisoned(source)
    with pytest.raises(EncoderError, match="encoder 'proj' gave non-finite outputs"):
        raycache.fill(nan_fill(str(source), str(tmp_path / "a"), in_process=False))
    assert not list((tmp_path / "a").rglob("manifest.json"))
    ray = raycache.fill(nan_fill(str(source), str(tmp_path / "b"), in_process=False,
                                 on_bad_rows="skip"))
    local = raycache.fill(nan_fill(str(source), str(tmp_path / "c"), on_bad_rows="skip"))
    assert "in-process" not in ray.pool and "in-process" in local.pool
    assert sorted(s.key for s in ray.cache.manifest.skipped) == sorted(keys)
    assert ray.cache.manifest.skipped == local.cache.manifest.skipped
    assert ray.cache.read_table().equals(local.cache.read_table())


GPU_DRIVER = """
import json, sys
import ray
import raycache
ray.init(num_cpus=4, num_gpus=1, include_dashboard=False, log_to_driver=False)
result = raycache.fill(json.loads(sys.argv[1]))
print(json.dumps({"pool": result.pool, "skipped": [s.key for s in result.cache.manifest.skipped],
                  "keys": result.cache.read_table().column("id").to_pylist()}))
"""


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_the_gpu_shaped_fill_skips_the_same_rows(tmp_path, source):
    """The GPU pipeline's own shape (a prepare stage, the model on GPU actors, the writer as
    tasks; models on the CPU by the test switch): the marks travel through every stage."""
    import json
    import os
    import subprocess
    import sys

    from raycache._compute.pool import GPU_ON_CPU

    keys = poisoned(source)
    cfg = nan_fill(str(source), str(tmp_path / "gpu"), in_process="auto", num_gpus=1,
                   on_bad_rows="skip", rows_per_shard=50)
    tests = str(Path(__file__).resolve().parent)
    env = {**os.environ, GPU_ON_CPU: "1",
           "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", GPU_DRIVER, json.dumps(cfg)], env=env,
                          capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    [run] = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert "GPU" in run["pool"] and sorted(run["skipped"]) == sorted(keys)
    assert sorted(run["keys"]) == sorted(set(pq.read_table(source).column("id").to_pylist())
                                         - set(keys))


def test_non_finite_embeddings_an_older_cache_holds_are_not_reused(tmp_path, source,
                                                                   monkeypatch):
    """Reuse by content takes embeddings from other caches of the store: ones that an older
    raycache committed with NaN are caught as they are taken, and named as reused."""
    from raycache._fill import stages

    store = str(tmp_path / "store")
    with monkeypatch.context() as m:
        m.setattr(stages, "bad_rows", lambda emb: None)  # as an older raycache did
        raycache.fill(nan_fill(str(source), store, name="old"))
    monkeypatch.setattr(toy_encoders, "POISON", False)  # the same encoder, finite now
    with pytest.raises(EncoderError, match="reused from a cache in the store.*reuse: false"):
        raycache.fill(nan_fill(str(source), store, name="new"))
    assert raycache.fill(nan_fill(str(source), store, name="new", reuse=False)).cache \
        .manifest.rows == 300


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_bad_rows_finds_exactly_the_rows_with_nan_or_inf(dtype):
    from raycache._fill.finite import bad_rows

    rng = np.random.default_rng(0)
    emb = rng.normal(size=(50, 12)).astype(dtype)
    big = np.finfo(dtype).max
    emb[3, 0], emb[7, 5], emb[11, 11] = np.nan, np.inf, -np.inf
    emb[20, :2] = (np.inf, -np.inf)  # sums to NaN
    emb[30, :] = big  # finite values whose sum overflows: not bad
    emb[31, :2] = (big, -big)
    want = np.zeros(50, bool)
    want[[3, 7, 11, 20]] = True
    np.testing.assert_array_equal(bad_rows(emb), want)
    assert bad_rows(np.delete(emb, [3, 7, 11, 20], axis=0)) is None
    assert bad_rows(emb[:0]) is None

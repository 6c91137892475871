"""Small CPU fills run the pipeline's stages in the calling process, without Ray: the same
shards and embeddings as Ray Data's pipeline, the same resume, and auto picks it only where
no cluster is running or named."""

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import raycache
from raycache import ConfigError
from raycache._compute.pool import size_pool
from raycache._fill.encode import run_in_process
from raycache._fill.plan import load_config as load_fill
from raycache._fill.plan import plan
from raycache._source import files as sources
from tests.conftest import fill_in_fresh_process, separable, toy_fill

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def source(tmp_path) -> Path:
    (tmp_path / "source").mkdir()
    pq.write_table(separable(n=600), tmp_path / "source" / "a.parquet")
    return tmp_path / "source"


def columns(cache) -> tuple[list, np.ndarray, list]:
    t = cache.read_table()
    return (t.column("id").to_pylist(), np.stack(t.column("proj").to_numpy(zero_copy_only=False)),
            t.column("label").to_pylist())


@pytest.mark.ray
def test_in_process_fill_equals_the_ray_pipeline_and_starts_no_ray(ray_session, source, tmp_path):
    cfg = toy_fill(str(source), str(tmp_path / "local"), rows_per_shard=150)
    got = fill_in_fresh_process(cfg)
    pool, fingerprint, encoded, ray_started = (got["pool"], got["fingerprint"], got["encoded"],
                                               got["ray_started"])
    assert pool.startswith("in-process") and encoded == 600 and not ray_started

    local = raycache.open_cache("toy", str(tmp_path / "local"))
    assert [s.rows for s in local.manifest.shards] == [150] * 4
    # Ray Data tasks on CPUs; the second fill's tasks find the stages and the model that
    # their worker processes kept from the first (_compute.memo): the same shards all the same
    for again in ("ray", "ray-again"):
        piped = raycache.fill({**cfg, "store": {"uri": str(tmp_path / again)},
                               "in_process": False})
        assert "encoder task(s)" in piped.pool and piped.cache.fingerprint == fingerprint
        (k1, x1, y1), (k2, x2, y2) = columns(local), columns(piped.cache)
        assert k1 == k2 and y1 == y2 and np.array_equal(x1, x2)  # the same bits
        assert [(s.path, s.rows, s.sha256) for s in piped.cache.manifest.shards] == \
            [(s.path, s.rows, s.sha256) for s in local.manifest.shards]  # the same files


def test_in_process_fill_resumes_at_the_shard(source, tmp_path):
    cfg = load_fill(toy_fill(str(source), str(tmp_path / "store"), rows_per_shard=50,
                                    in_process=True))
    p = plan(cfg)
    [unit], _ = sources.plan_units(p.files, p.format, {}, cfg.rows_per_shard)
    first_200 = sources.Unit(unit.file, unit.groups, 0, 600, done=(sources.Span(200, 600),))
    pool = size_pool(cfg.pool, [{"CPU": 2.0}], 1)
    assert len(list(run_in_process(p, [first_200], pool))) == 4  # an interrupted fill's shards
    result = raycache.fill(cfg)
    assert result.resumed_rows == 200 and result.encoded_rows == 400
    keys = result.cache.read_table().column("id").to_pylist()
    assert len(keys) == len(set(keys)) == 600


def test_in_process_setting_is_checked():
    with pytest.raises(ConfigError) as err:
        load_fill(toy_fill("src", "store", in_process="yes"))
    assert "in_process='yes'" in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_fill(toy_fill("src", "store", in_process=True, num_gpus=1))
    assert "num_gpus" in str(err.value)


def test_an_interrupted_fill_of_less_than_a_shard_keeps_what_it_wrote(tmp_path, monkeypatch):
    """3,000 rows, rows_per_shard 8,192 (the default): blocks and shards of 1,024 rows
    (SMALL_BLOCK_ROWS), each with its resume record, so Ctrl-C during the third keeps two."""
    from raycache._fill import shards

    (tmp_path / "source").mkdir()
    pq.write_table(separable(n=3000), tmp_path / "source" / "a.parquet")
    cfg = toy_fill(str(tmp_path / "source"), str(tmp_path / "store"), in_process=True,
                   rows_per_shard=8192)
    real, calls = shards._write, []

    def write(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(shards, "_write", write)
    with pytest.raises(KeyboardInterrupt):
        raycache.fill(cfg)
    monkeypatch.setattr(shards, "_write", real)
    result = raycache.fill(cfg)
    assert result.resumed_rows == 2048 and result.encoded_rows == 952
    assert [s.rows for s in result.cache.manifest.shards] == [1024, 1024, 952]
    keys = result.cache.read_table().column("id").to_pylist()
    assert len(keys) == len(set(keys)) == 3000

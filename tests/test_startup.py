"""A fill's fixed costs, structurally: pools sized from the cores that exist, `import raycache`
loading only what is touched, weights hashed once a process, and a refill loading its model
only where rows need it."""

import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raycache
from raycache._compute.pool import CORES, nodes, size_pool
from raycache._compute.pool_config import PoolConfig
from raycache._encoders import ENCODERS
from raycache._encoders import base as encoder_base
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(120)


def test_a_gpu_pool_starts_a_tokeniser_a_core_not_one_a_logical_cpu():
    told = {"CPU": 16.0, "GPU": 1.0}  # Ray told of 16 CPUs on a machine of 2 cores
    assert size_pool(PoolConfig(), [told]).prepare_actors == 13
    pool = size_pool(PoolConfig(), [{**told, CORES: 2.0}])
    assert (pool.actors, pool.prepare_actors) == (1, 1)
    big = size_pool(PoolConfig(), [{**told, CORES: 16.0}])  # cores to spare: as before
    assert big.prepare_actors == 13


def test_a_cpu_pool_runs_as_many_tasks_at_once_as_there_are_cores():
    told = {"CPU": 16.0}
    assert (size_pool(PoolConfig(), [told]).actors, size_pool(PoolConfig(), [told]).threads) \
        == (4, 4)
    pool = size_pool(PoolConfig(), [{**told, CORES: 2.0}])
    assert (pool.actors, pool.threads) == (2, 1)


@pytest.mark.ray
def test_the_node_this_process_runs_on_says_its_cores(ray_session):
    here = [n for n in nodes() if CORES in n]
    assert len(here) == 1 and here[0][CORES] == len(os.sched_getaffinity(0))


def test_import_raycache_loads_no_stage_until_a_name_is_used():
    code = ("import sys, raycache; before = {m for m in sys.modules if m.startswith('raycache.')};"
            "raycache.FillConfig; after = 'raycache._fill.config' in sys.modules;"
            "print(sorted(before), after)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    loaded, after = out.rsplit(" ", 1)
    assert "raycache._fill" not in loaded and "raycache._cache" not in loaded, loaded
    assert after.strip() == "True"
    assert set(raycache.__all__) <= set(dir(raycache))


def test_weights_are_hashed_once_a_process_until_the_file_changes(tmp_path, monkeypatch):
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"w" * 1000)
    reads = []
    real = encoder_base._digest
    monkeypatch.setattr(encoder_base, "_digest", lambda *a: reads.append(a) or real(*a))
    first = encoder_base.digest_files([weights], tmp_path)
    assert encoder_base.digest_files([weights], tmp_path) == first and len(reads) == 1
    weights.write_bytes(b"v" * 1000)
    os.utime(weights, ns=(1, 1))
    assert encoder_base.digest_files([weights], tmp_path) != first and len(reads) == 2


def test_a_refill_loads_its_model_only_where_rows_changed_and_then_once(tmp_path, monkeypatch):
    source = tmp_path / "a.parquet"
    table = separable(n=300)
    pq.write_table(table, source)
    cfg = toy_fill(str(source), str(tmp_path / "store"), rows_per_shard=100, in_process=True)
    raycache.fill(cfg)
    loads = []
    family = ENCODERS["torch"]
    counted = family._replace(load=lambda *a, **k: loads.append(1) or family.load(*a, **k))
    monkeypatch.setitem(ENCODERS, "torch", counted)
    assert raycache.fill(cfg).encoded_rows == 0 and loads == []  # unchanged: a hit
    features = table.column("features").to_pylist()
    features[7] = [x + 1.0 for x in features[7]]
    index = table.schema.get_field_index("features")
    pq.write_table(table.set_column(index, "features", pa.array(features,
                                                                table.schema.field(index).type)),
                   source)
    again = raycache.fill(cfg)
    assert again.encoded_rows == 1 and len(loads) == 1

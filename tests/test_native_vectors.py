"""Vectors as Arrow knows them: `Cache.to_numpy` (2-D, a view where one shard holds the rows),
`to_arrow` (FixedSizeList<float32>[dim], DuckDB's FLOAT[dim]), `to_pandas(vectors=...)`, on a
plain cache and on a version that keeps only some rows of a shared shard."""

import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raycache
from raycache._cache.native import matrix, tensors
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def caches(tmp_path_factory) -> dict[str, raycache.Cache]:
    """A 3-shard cache, a 1-shard cache, and a second version of the first with 5 rows of
    its file b deleted (two shared shards keep 45 of their 50 rows)."""
    root = tmp_path_factory.mktemp("native")
    source = root / "source"
    source.mkdir()
    table = separable(n=600)
    for i, name in enumerate("abc"):
        pq.write_table(table.slice(200 * i, 200), source / f"{name}.parquet")
    cfg = toy_fill(str(source), str(root / "store"), rows_per_shard=50, in_process=True)
    v1 = raycache.fill(cfg).cache
    (root / "whole").mkdir()
    pq.write_table(table, root / "whole" / "all.parquet")
    one = raycache.fill({**cfg, "name": "one", "rows_per_shard": 1000,
                         "source": {**cfg["source"], "path": str(root / "whole")}}).cache
    b = pq.read_table(source / "b.parquet")
    time.sleep(0.01)
    pq.write_table(b.filter(pa.array([i % 10 != 3 or i >= 50 for i in range(200)])),
                   source / "b.parquet")
    v2 = raycache.fill(cfg).cache
    return {"v1": v1, "one": one, "v2": v2}


def stacked(cache: raycache.Cache, column: str = "proj") -> np.ndarray:
    return np.stack(cache.read_table([column]).column(column).to_numpy(zero_copy_only=False))


def test_to_numpy_is_the_read_rows_as_one_2d_array(caches):
    for cache in caches.values():
        x = cache.to_numpy("proj")
        assert x.shape == (cache.manifest.rows, 16) and x.dtype == np.float32
        np.testing.assert_array_equal(x, stacked(cache))
    assert caches["v2"].manifest.rows == 595  # the kept rows only
    assert any(s.keep for s in caches["v2"].manifest.shards)


def test_to_numpy_of_one_shard_is_a_view_and_of_many_one_array(caches):
    view = caches["one"].to_numpy()
    assert len(caches["one"].manifest.shards) == 1
    assert not view.flags.owndata and not view.flags.writeable  # the decoded shard's buffer
    many = caches["v1"].to_numpy()
    assert many.flags.owndata and len(caches["v1"].manifest.shards) == 12


def test_to_numpy_limit_and_dtype(caches):
    cache = caches["v2"]
    first = cache.to_numpy(limit=120)
    np.testing.assert_array_equal(first, stacked(cache)[:120])
    half = cache.to_numpy(limit=7, dtype="float16")
    assert half.dtype == np.float16 and half.shape == (7, 16)
    np.testing.assert_array_equal(half, stacked(cache)[:7].astype(np.float16))
    assert cache.to_numpy(limit=0).shape == (0, 16)


def test_to_numpy_names_the_encoders_when_the_one_asked_for_is_not_there(caches):
    with pytest.raises(raycache.ConfigError, match=r"encoders \['proj'\]: 'minilm' is not one"):
        caches["v1"].to_numpy("minilm")
    with pytest.raises(raycache.ConfigError, match=r"dtype='int8'.*expected one of"):
        caches["v1"].to_numpy(dtype="int8")


def test_to_arrow_is_a_fixed_size_list_of_float32_that_duckdb_reads_as_float_dim(caches):
    cache = caches["v2"]
    table = arrow_table = cache.to_arrow(["id", "label", "proj"])
    kind = table.schema.field("proj").type
    assert pa.types.is_fixed_size_list(kind) and kind.list_size == 16
    assert kind.value_type == pa.float32() and table.num_rows == 595
    assert table.column("id").to_pylist() == cache.read_table(["id"]).column("id").to_pylist()
    assert arrow_table is table  # DuckDB finds the table by its variable's name
    found = duckdb.sql("select id, proj from arrow_table order by id")
    assert str(found.types[1]) == "FLOAT[16]"
    rows = dict(found.fetchall())
    want = dict(zip(table.column("id").to_pylist(), stacked(cache), strict=True))
    assert rows.keys() == want.keys()
    for key, vector in want.items():
        np.testing.assert_array_equal(np.asarray(rows[key], np.float32), vector)
    half = cache.to_arrow(["proj"], limit=3, dtype="float16").schema.field("proj").type
    assert half.value_type == pa.float16()


def test_to_pandas_gives_vectors_as_rows_wide_columns_or_arrow(caches):
    cache = caches["v2"]
    want = stacked(cache)
    rows = cache.to_pandas(["id", "proj", "label"])
    assert list(rows.columns) == ["id", "proj", "label"]
    np.testing.assert_array_equal(np.stack(rows["proj"]), want)
    wide = cache.to_pandas(["id", "proj"], vectors="wide")
    assert list(wide.columns) == ["id", *(f"proj_{j}" for j in range(16))]
    np.testing.assert_array_equal(wide.filter(like="proj_").to_numpy(), want)
    arrow = cache.to_pandas(["id", "proj"], vectors="arrow")
    column = pa.chunked_array([arrow["proj"].array._pa_array]).combine_chunks()
    np.testing.assert_array_equal(matrix(column), want)
    with pytest.raises(raycache.ConfigError, match=r"vectors='2d'.*expected one of"):
        cache.to_pandas(vectors="2d")


def test_tensor_columns_hold_the_same_numbers_as_fixed_shape_tensors():
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    kind = pa.list_(pa.field("element", pa.float32(), nullable=False), 4)  # as shards unpack
    lists = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), type=kind)
    table = tensors(pa.table({"v": pa.chunked_array([lists.slice(0, 2), lists.slice(2)]),
                              "k": range(6)}))
    kind = table.schema.field("v").type
    assert isinstance(kind, pa.FixedShapeTensorType) and kind.shape == [4]
    np.testing.assert_array_equal(np.concatenate(
        [c.to_numpy_ndarray() for c in table.column("v").chunks]), x)


def test_shards_outside_raycache_read_as_vectors_with_the_documented_view(caches):
    """docs/format.md's read of a shard by hand gives read_table's vectors."""
    cache = caches["one"]
    chunk = pq.read_table(Path(cache.shard_paths()[0])).column("proj").combine_chunks()
    x = np.frombuffer(chunk.buffers()[1], "<f4").reshape(len(chunk), 16)
    np.testing.assert_array_equal(x, stacked(cache))


def test_a_version_with_kept_rows_as_a_ray_dataset_has_2d_batches_of_its_rows(ray_session,
                                                                              caches):
    cache = caches["v2"]
    batch = cache.to_ray_dataset(["id", "proj"]).take_batch(1000, batch_format="numpy")
    assert batch["proj"].shape == (595, 16) and batch["proj"].dtype == np.float32
    got = dict(zip(batch["id"].tolist(), batch["proj"], strict=True))
    ids = cache.read_table(["id"]).column("id").to_pylist()
    assert sorted(got) == sorted(ids)
    for key, vector in zip(ids, cache.to_numpy(), strict=True):
        np.testing.assert_array_equal(got[key], vector)

"""`raycache.export`: a version's exact rows (a shared shard's kept rows only) to Parquet that
DuckDB reads as FLOAT[dim] and Polars as Array, to Lance, and to Qdrant (local mode), each
checked against `read_table`; atomic, on fsspec stores and streams."""

import io
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import duckdb
import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fsspec.implementations.local import LocalFileSystem

import raycache
from raycache._export import parquet as parquet_export
from raycache._export import target as export_target
from raycache._export.qdrant import point_id
from raycache._export.rows import Rows
from raycache._export.target import STALE_S
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> raycache.Cache:
    """The second version of a 600-row cache whose file b lost 5 rows: two of its shards are
    shared with the first version and keep 45 of their 50 rows."""
    root = tmp_path_factory.mktemp("export")
    source = root / "source"
    source.mkdir()
    table = separable(n=600)
    for i, name in enumerate("abc"):
        pq.write_table(table.slice(200 * i, 200), source / f"{name}.parquet")
    cfg = toy_fill(str(source), str(root / "store"), rows_per_shard=50, in_process=True)
    raycache.fill(cfg)
    b = pq.read_table(source / "b.parquet")
    time.sleep(0.01)
    pq.write_table(b.filter(pa.array([i % 10 != 3 or i >= 50 for i in range(200)])),
                   source / "b.parquet")
    v2 = raycache.fill(cfg).cache
    assert v2.manifest.rows == 595 and any(s.keep for s in v2.manifest.shards)
    return v2


def expected(cache: raycache.Cache) -> dict:
    """read_table's rows by key: (label, name, vector)."""
    t = cache.read_table(["id", "label", "name", "proj"])
    vectors = np.stack(t.column("proj").to_numpy(zero_copy_only=False))
    return {k: (lab, nam, v) for k, lab, nam, v in zip(
        t.column("id").to_pylist(), t.column("label").to_pylist(), t.column("name").to_pylist(),
        vectors, strict=True)}


def assert_rows(got: dict, cache: raycache.Cache, atol: float = 0.0) -> None:
    want = expected(cache)
    assert len(got) == len(want) == 595 and got.keys() == want.keys()
    for key, (label, name, vector) in want.items():
        assert got[key][:2] == (label, name), key
        np.testing.assert_allclose(np.asarray(got[key][2], np.float32), vector, atol=atol)


def test_parquet_export_reads_in_duckdb_as_float_dim_and_polars_as_array(cache, tmp_path):
    out = tmp_path / "out" / "toy.parquet"
    done = raycache.export(cache, str(out))
    assert done.rows == 595 and done.bytes == out.stat().st_size and done.format == "parquet"
    assert done.columns == ("id", "label", "name", "proj") and done.dims == {"proj": 16}
    assert "595 rows (proj[16] float32) to parquet" in done.summary()
    assert [p.name for p in out.parent.iterdir()] == ["toy.parquet"]  # no temporary file left
    # Parquet has no fixed-size list: DuckDB reads a list, and casts it to the fixed-size array
    assert [str(t) for t in duckdb.sql(f"select proj from '{out}'").types] == ["FLOAT[]"]
    found = duckdb.sql(f"select id, label, name, proj::FLOAT[16] from '{out}'")
    assert [str(t) for t in found.types] == ["VARCHAR", "BIGINT", "VARCHAR", "FLOAT[16]"]
    assert_rows({r[0]: r[1:] for r in found.fetchall()}, cache)
    similar = duckdb.sql(f"select id from '{out}' order by array_cosine_similarity("
                         f"proj::FLOAT[16], (select proj::FLOAT[16] from '{out}' limit 1)) "
                         "desc limit 1").fetchall()[0]
    assert similar[0] == next(iter(expected(cache)))
    import polars as pl

    frame = pl.read_parquet(out)
    assert frame.schema["proj"] == pl.Array(pl.Float32, 16)
    assert_rows({r["id"]: (r["label"], r["name"], r["proj"]) for r in frame.iter_rows(named=True)},
                cache)
    meta = pq.read_schema(out).metadata
    assert meta[b"raycache.cache"] == f"toy/{cache.fingerprint}".encode()


def test_parquet_export_refuses_an_existing_file_and_replaces_it_with_overwrite(cache, tmp_path):
    out = tmp_path / "toy.parquet"
    out.write_bytes(b"not yours")
    with pytest.raises(raycache.ConfigError, match="exists; pass overwrite=True"):
        raycache.export(cache, str(out))
    assert out.read_bytes() == b"not yours"
    assert raycache.export(cache, str(out), overwrite=True).rows == 595
    assert pq.read_metadata(out).num_rows == 595


def test_a_failed_parquet_export_leaves_neither_the_file_nor_its_temporary(cache, tmp_path,
                                                                           monkeypatch):
    real = Rows.tables

    def fails_after_one_shard(self):
        shards = real(self)
        yield next(shards)
        raise OSError("the store went away")

    monkeypatch.setattr(Rows, "tables", fails_after_one_shard)
    with pytest.raises(OSError, match="went away"):
        raycache.export(cache, str(tmp_path / "toy.parquet"))
    assert list(tmp_path.iterdir()) == []


def test_parquet_export_to_an_fsspec_store_and_to_a_stream(cache):
    done = raycache.export(cache, "memory://exports/toy.parquet", dtype="float16")
    assert done.to == "memory://exports/toy.parquet" and done.rows == 595
    fs = fsspec.filesystem("memory")
    assert [p.rsplit("/", 1)[-1] for p in fs.ls("/exports", detail=False)] == ["toy.parquet"]
    with fs.open("/exports/toy.parquet", "rb") as f:
        table = pq.read_table(f)
    assert table.schema.field("proj").type.value_type == pa.float16()
    sink = io.BytesIO()
    assert raycache.export(cache, sink).to == "-"
    streamed = pq.read_table(pa.BufferReader(sink.getvalue()))
    raycache.export(cache, "memory://exports/b.parquet")
    with fs.open("/exports/b.parquet", "rb") as f:
        assert streamed.equals(pq.read_table(f)) and streamed.num_rows == 595


def test_bad_export_settings_are_refused_before_anything_is_read(cache, tmp_path):
    with pytest.raises(raycache.ConfigError, match=r"format='faiss' is not an export format"):
        raycache.export(cache, str(tmp_path / "x"), format="faiss")
    with pytest.raises(raycache.ConfigError, match=r"encoder 'minilm' is not in cache toy/.*"
                                                   r"it has \['proj'\]"):
        raycache.export(cache, str(tmp_path / "x"), encoders=["minilm"])
    with pytest.raises(raycache.ConfigError, match=r"dtype='int8'"):
        raycache.export(cache, str(tmp_path / "x"), dtype="int8")
    assert list(tmp_path.iterdir()) == []


def test_an_export_by_name_takes_the_newest_version_or_the_one_named(cache, tmp_path):
    store = cache.store.uri
    newest = raycache.export("toy", str(tmp_path / "a.parquet"), store=store)
    assert newest.cache == f"toy/{cache.fingerprint}"
    first = raycache.ls(store, "toy")[0]
    older = raycache.export(f"toy/{first.fingerprint}", str(tmp_path / "b.parquet"), store=store)
    assert older.rows == first.manifest.rows == 600


def test_lance_export_holds_the_version_rows_and_an_index(cache, tmp_path):
    lance = pytest.importorskip("lance")  # a test extra: installed by `make test`
    out = tmp_path / "toy.lance"
    done = raycache.export(cache, str(out), format="lance", index=True)
    assert done.rows == 595
    dataset = lance.dataset(str(out))
    t = dataset.to_table()
    kind = t.schema.field("proj").type
    assert pa.types.is_fixed_size_list(kind) and kind.list_size == 16
    assert kind.value_type == pa.float32()
    assert_rows({k: (lab, nam, v) for k, lab, nam, v in zip(
        t.column("id").to_pylist(), t.column("label").to_pylist(), t.column("name").to_pylist(),
        t.column("proj").to_pylist(), strict=True)}, cache)
    assert [i["fields"] if isinstance(i, dict) else i.fields for i in dataset.list_indices()]
    with pytest.raises(raycache.ConfigError, match="exists; pass overwrite=True"):
        raycache.export(cache, str(out), format="lance")


def test_qdrant_export_has_ids_from_keys_and_key_and_labels_in_the_payload(cache, tmp_path):
    pytest.importorskip("qdrant_client")  # a test extra: installed by `make test`
    from qdrant_client import QdrantClient

    client = QdrantClient(":memory:")
    done = raycache.export(cache, client, format="qdrant")
    assert done.rows == 595 and done.to == "a QdrantClient collection toy"
    points, _ = client.scroll("toy", limit=1000, with_vectors=True, with_payload=True)
    assert len(points) == 595
    assert all(p.id == point_id(p.payload["id"]) for p in points)
    want = expected(cache)
    unit = {k: (lab, nam, v / np.linalg.norm(v)) for k, (lab, nam, v) in want.items()}
    got = {p.payload["id"]: (p.payload["label"], p.payload["name"], p.vector["proj"])
           for p in points}
    assert got.keys() == unit.keys()
    for key, (label, name, vector) in unit.items():
        assert got[key][:2] == (label, name)
        np.testing.assert_allclose(got[key][2], vector, atol=1e-6)  # cosine: stored normalised
    key, (_, _, vector) = next(iter(want.items()))
    hit = client.query_points("toy", query=vector.tolist(), using="proj", limit=1)
    assert hit.points[0].payload["id"] == key
    assert hit.points[0].score == pytest.approx(1.0, abs=1e-5)
    with pytest.raises(raycache.ConfigError, match="collection 'toy' exists"):
        raycache.export(cache, client, format="qdrant")


def test_qdrant_export_to_a_local_folder_is_stable_across_exports(cache, tmp_path):
    pytest.importorskip("qdrant_client")
    from qdrant_client import QdrantClient

    folder = str(tmp_path / "qdrant")
    raycache.export(cache, folder, format="qdrant", collection="docs")
    raycache.export(cache, folder, format="qdrant", collection="docs", overwrite=True)
    client = QdrantClient(path=folder)
    try:
        assert client.count("docs", exact=True).count == 595
        some = next(iter(expected(cache)))
        [point] = client.retrieve("docs", [point_id(some)], with_payload=True)
        assert point.payload["id"] == some
    finally:
        client.close()
    assert Path(folder).is_dir()


def test_the_parquet_exporter_checks_a_folder_target(tmp_path):
    assert "is a folder" in parquet_export.check(str(tmp_path), {}, True)[0]


def test_an_export_holds_a_few_shards_at_a_time_whatever_the_cache_size(tmp_path,
                                                                         monkeypatch):
    """40 shards or more (the first block comes in small pieces): Arrow's memory while the
    Parquet export runs stays a small part of what the whole version takes (read_table)."""
    source = tmp_path / "source"
    source.mkdir()
    pq.write_table(separable(n=20_000), source / "a.parquet")
    cfg = toy_fill(str(source), str(tmp_path / "store"), rows_per_shard=500, in_process=True)
    cfg["encoders"][0]["kwargs"]["out_dim"] = 64
    big = raycache.fill(cfg).cache
    shards = len(big.manifest.shards)
    assert 40 <= shards <= 45  # 500 rows each, and the first block's few smaller ones
    base = pa.total_allocated_bytes()
    whole = big.read_table(["id", "label", "name", "proj"])
    everything = pa.total_allocated_bytes() - base
    del whole
    real, peak = Rows.tables, []

    def sampled(self):
        for table in real(self):
            peak.append(pa.total_allocated_bytes() - base)
            yield table

    monkeypatch.setattr(Rows, "tables", sampled)
    assert raycache.export(big, str(tmp_path / "big.parquet")).rows == 20_000
    assert len(peak) == shards and everything > 5_000_000
    assert max(peak) < 0.3 * everything, (max(peak), everything)


def test_import_raycache_loads_no_exporter_package():
    code = ("import sys, raycache; print(sorted(m for m in ('lance', 'qdrant_client', 'polars', "
            "'duckdb') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "[]"


@pytest.mark.s3
def test_parquet_export_to_s3_leaves_only_the_file(cache, bucket):
    import s3fs

    done = raycache.export(cache, f"{bucket}/exports/toy.parquet")
    assert done.rows == 595 and done.to == f"{bucket}/exports/toy.parquet"
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    assert fs.ls(f"{bucket}/exports", detail=False) == [f"{bucket[5:]}/exports/toy.parquet"]
    with fs.open(f"{bucket}/exports/toy.parquet", "rb") as f:
        table = pq.read_table(f)
    assert table.num_rows == 595 and done.bytes == fs.size(f"{bucket}/exports/toy.parquet")
    assert table.column("id").to_pylist() == cache.read_table(["id"]).column("id").to_pylist()


class Killed(BaseException):
    """What a kill at that very moment leaves: nothing after it runs but `finally` blocks."""


def test_overwrite_keeps_the_old_file_until_the_new_one_is_in_its_place(cache, tmp_path,
                                                                          monkeypatch):
    out = tmp_path / "toy.parquet"
    out.write_bytes(b"the old export")

    def killed(*_, **__):
        raise Killed

    monkeypatch.setattr(os, "replace", killed)  # a kill as the new file moves in
    monkeypatch.setattr(LocalFileSystem, "mv", killed)
    with pytest.raises(Killed):
        raycache.export(cache, str(out), overwrite=True)
    assert out.read_bytes() == b"the old export"  # never removed first
    assert [p.name for p in tmp_path.iterdir()] == ["toy.parquet"]
    monkeypatch.undo()
    assert raycache.export(cache, str(out), overwrite=True).rows == 595
    assert pq.read_metadata(out).num_rows == 595


def test_an_export_sweeps_the_stale_temporary_files_of_its_own_target_only(cache, tmp_path):
    def temp(target: str, age: float) -> Path:
        path = tmp_path / f"{parquet_export.TEMP}{uuid.uuid4().hex}-{target}"
        path.write_bytes(b"a killed export's rows")
        os.utime(path, (time.time() - age, time.time() - age))
        return path

    stale, fresh = temp("toy.parquet", STALE_S + 60), temp("toy.parquet", 60)
    other = temp("other.parquet", STALE_S + 60)  # another target's: not this export's to judge
    near = tmp_path / f"{parquet_export.TEMP}notes-toy.parquet"  # not the pattern
    near.write_bytes(b"yours")
    os.utime(near, (0, 0))
    raycache.export(cache, str(tmp_path / "toy.parquet"))
    assert not stale.exists() and fresh.exists() and other.exists() and near.exists()
    assert pq.read_metadata(tmp_path / "toy.parquet").num_rows == 595


@pytest.fixture
def store_copy(cache, tmp_path) -> raycache.Cache:
    """The shared version in a store of its own, as opened (its manifest read) before any
    upkeep."""
    shutil.copytree(Path(cache.store.uri), tmp_path / "store")
    return raycache.open_cache("toy", str(tmp_path / "store"), cache.fingerprint)


def test_an_export_racing_compact_and_gc_exports_the_version_again_not_damaged(store_copy,
                                                                               tmp_path):
    """The export read the manifest; a compaction then rewrote the version's shared shards in
    its own folder and gc removed the older version with the shards it no longer reads."""
    store = store_copy.store.uri
    assert raycache.compact("toy", store, store_copy.fingerprint, below=1.0,
                            progress=False).compaction
    older = raycache.ls(store, "toy")[0]
    assert older.fingerprint != store_copy.fingerprint
    gone = raycache.gc(store, retain=1, delete=True).removed
    assert [r.usage.id for r in gone] == [f"toy/{older.fingerprint}"]
    with pytest.raises(raycache.StoreError, match="missing"):
        store_copy.read_table(["id"])  # the stale manifest names shards that are gone
    done = raycache.export(store_copy, str(tmp_path / "toy.parquet"))
    now = raycache.open_cache("toy", store, store_copy.fingerprint)
    t = pq.read_table(tmp_path / "toy.parquet")
    assert done.rows == t.num_rows == 595
    assert_rows({k: (lab, nam, v) for k, lab, nam, v in zip(
        t.column("id").to_pylist(), t.column("label").to_pylist(), t.column("name").to_pylist(),
        t.column("proj").to_pylist(), strict=True)}, now)
    with pytest.raises(raycache.StoreError, match=r"was compacted or repaired while it was "
                                                  r"exported to a stream.*Run the export again"):
        raycache.export(store_copy, io.BytesIO())  # a stream cannot start again


def test_a_removed_shard_of_an_unchanged_manifest_is_still_damage(store_copy, tmp_path):
    Path(store_copy.shard_urls()[-1]).unlink()
    with pytest.raises(raycache.CorruptShard, match="missing"):
        raycache.export(store_copy, str(tmp_path / "toy.parquet"))
    assert list(tmp_path.glob("*.parquet")) == []


@pytest.mark.s3
def test_an_export_to_a_bucket_that_does_not_exist_creates_none(cache, s3_endpoint, tmp_path):
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    with pytest.raises(raycache.ConfigError, match=r"bucket 'rc-typo-bucket' does not exist.*"
                                                   r"never creates one.*spelling"):
        raycache.export(cache, "s3://rc-typo-bucket/exports/toy.parquet")
    assert not fs.exists("rc-typo-bucket")
    with pytest.raises(raycache.ConfigError, match="bucket 'rc-typo-bucket' does not exist"):
        parquet_export.write(Rows(cache, {"proj": 16}, "float32"),
                             "s3://rc-typo-bucket/toy.parquet", {}, False)
    assert not fs.exists("rc-typo-bucket")


@pytest.mark.s3
def test_an_s3_overwrite_never_removes_the_old_object_and_sweeps_stale_temporaries(
        cache, bucket, monkeypatch):
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    target = f"{bucket[5:]}/exports/toy.parquet"
    fs.pipe_file(target, b"the old export")
    stale = f"{bucket[5:]}/exports/{parquet_export.TEMP}{uuid.uuid4().hex}-toy.parquet"
    fs.pipe_file(stale, b"a killed export's rows")
    removed = []

    def spy(real):
        async def spied(self, path, *args, **kwargs):
            removed.extend([path] if isinstance(path, str) else path)
            return await real(self, path, *args, **kwargs)
        return spied

    for name in ("_rm", "_rm_file"):  # what the export's own client (made after this) calls
        monkeypatch.setattr(s3fs.S3FileSystem, name, spy(getattr(s3fs.S3FileSystem, name)))
    monkeypatch.setattr(export_target, "STALE_S", 0.0)  # moto's objects cannot be backdated
    done = raycache.export(cache, f"{bucket}/exports/toy.parquet", overwrite=True,
                           options={"skip_instance_cache": True})
    assert done.rows == 595 and target not in removed and stale in removed
    assert fs.ls(f"{bucket}/exports", detail=False) == [target]
    with fs.open(target, "rb") as f:
        assert pq.read_metadata(f).num_rows == 595


def test_where_a_move_refuses_an_existing_target_the_old_file_survives_a_failed_one(
        cache, monkeypatch):
    """A filesystem whose move will not replace (an SFTP server's rename): the old file moves
    aside first, and back where the new one cannot follow."""
    from fsspec.implementations.memory import MemoryFileSystem

    fs, real = fsspec.filesystem("memory"), MemoryFileSystem.mv
    fs.pipe_file("/refusing/toy.parquet", b"the old export")
    fails = []

    def refusing(self, path1, path2, **kwargs):
        if self.exists(path2):
            raise FileExistsError(path2)
        if fails and path2.endswith("toy.parquet"):
            raise OSError(fails.pop())
        return real(self, path1, path2, **kwargs)

    monkeypatch.setattr(MemoryFileSystem, "mv", refusing)
    fails.append("the connection dropped")
    with pytest.raises(OSError, match="connection dropped"):
        raycache.export(cache, "memory://refusing/toy.parquet", overwrite=True)
    assert fs.cat_file("/refusing/toy.parquet") == b"the old export"
    assert fs.ls("/refusing", detail=False) == ["/refusing/toy.parquet"]
    assert raycache.export(cache, "memory://refusing/toy.parquet", overwrite=True).rows == 595
    assert fs.ls("/refusing", detail=False) == ["/refusing/toy.parquet"]
    with fs.open("/refusing/toy.parquet", "rb") as f:
        assert pq.read_metadata(f).num_rows == 595

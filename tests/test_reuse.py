"""Reuse by content: a fill takes every embedding the store already holds for the same encoder
identity and input value, and encodes only the rest; the new cache is still complete."""

import shutil

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import torch
from toy_encoders import projection

import raycache
from raycache import RaycacheError
from raycache._cache.columns import hash_column
from raycache._fill.reuse import input_hashes
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(120)


def embeddings(cache, column="proj") -> dict[str, np.ndarray]:
    t = cache.read_table(columns=["id", column])
    x = np.stack(t.column(column).to_numpy(zero_copy_only=False))
    return dict(zip(t.column("id").to_pylist(), x, strict=True))


@pytest.fixture
def first(tmp_path):
    """A committed cache of 600 rows in one file, and its config."""
    (tmp_path / "v1").mkdir()
    pq.write_table(separable(n=600), tmp_path / "v1" / "a.parquet")
    cfg = toy_fill(str(tmp_path / "v1"), str(tmp_path / "store"), rows_per_shard=150,
                   in_process=True,  # a warning raised in this process, with or without Ray
                   share=False)  # reuse by content itself: versions sharing are test_versions'

    result = raycache.fill(cfg)
    assert not result.hit and result.encoded_rows == 600 and result.reused_rows == 0
    return cfg, result.cache


def test_input_hashes_are_sha256_of_a_canonical_form_independent_of_the_arrow_type():
    text = input_hashes(pa.array(["a", "b", "a"]))
    assert text[0] == text[2] and text[0] != text[1] and len(text[0].as_py()) == 32
    assert input_hashes(pa.array(["a"], pa.large_string())) == input_hashes(pa.array(["a"]))
    f32 = pa.array([[1.0, 2.5]], pa.list_(pa.float32()))
    f64 = pa.FixedSizeListArray.from_arrays(pa.array([1.0, 2.5]), 2)
    assert input_hashes(f32) == input_hashes(f64)
    assert input_hashes(pa.array([[1.0, 2.0]])) != input_hashes(f32)


def test_the_same_bytes_at_a_new_path_encode_nothing(first, tmp_path):
    cfg, old = first
    (tmp_path / "v2").mkdir()
    shutil.copy(tmp_path / "v1" / "a.parquet", tmp_path / "v2" / "renamed.parquet")
    result = raycache.fill({**cfg, "source": {**cfg["source"], "path": str(tmp_path / "v2")}})
    assert result.cache.fingerprint != old.fingerprint  # a new source version: a new cache
    assert (result.encoded_rows, result.reused_rows) == (0, 600)
    assert "0 encoded, 600 reused" in result.summary()
    new, was = embeddings(result.cache), embeddings(old)
    assert new.keys() == was.keys() and all(np.array_equal(new[k], was[k]) for k in new)
    # self-contained: the new cache's shards hold every row, and the hashes travel with them
    table = result.cache.read_table()
    assert table.num_rows == 600 and hash_column("features") in table.column_names


def test_one_percent_changed_encodes_only_those_rows(first, tmp_path):
    cfg, old = first
    table = separable(n=600)
    feats = np.stack(table.column("features").to_numpy(zero_copy_only=False))
    changed = np.arange(0, 600, 100)  # 6 rows of 600
    feats[changed] += 1.0
    table = table.set_column(1, "features", pa.FixedSizeListArray.from_arrays(
        pa.array(feats.astype(np.float32).reshape(-1)), 8))
    (tmp_path / "v2").mkdir()
    pq.write_table(table, tmp_path / "v2" / "a.parquet")
    result = raycache.fill({**cfg, "source": {**cfg["source"], "path": str(tmp_path / "v2")}})
    assert (result.encoded_rows, result.reused_rows) == (6, 594)
    fresh = raycache.fill({**cfg, "source": {**cfg["source"], "path": str(tmp_path / "v2")},
                           "store": {"uri": str(tmp_path / "fresh")}})
    assert fresh.encoded_rows == 600
    new, want, was = embeddings(result.cache), embeddings(fresh.cache), embeddings(old)
    ids = [f"row-{i:05d}" for i in changed]
    assert all(np.allclose(new[k], want[k], atol=1e-6) for k in new)
    assert all(not np.allclose(new[k], was[k]) for k in ids)


def test_changed_labels_encode_nothing_and_reuse_false_encodes_everything(first, tmp_path):
    cfg, _ = first
    table = separable(n=600)
    table = table.set_column(2, "label", pc.subtract(pa.array([2] * 600), table.column("label")))
    (tmp_path / "v2").mkdir()
    pq.write_table(table, tmp_path / "v2" / "a.parquet")
    source = {**cfg["source"], "path": str(tmp_path / "v2")}
    result = raycache.fill({**cfg, "source": source})
    assert (result.encoded_rows, result.reused_rows) == (0, 600)
    got = result.cache.read_table(columns=["label"]).column("label").to_pylist()
    assert got == table.column("label").to_pylist()  # the new labels, the old embeddings
    again = raycache.fill({**cfg, "source": source, "reuse": False, "rows_per_shard": 300})
    assert (again.encoded_rows, again.reused_rows) == (600, 0)


def test_a_new_encoder_added_runs_only_that_encoder(first):
    cfg, old = first
    wide = {**cfg["encoders"][0], "name": "wide", "kwargs": {"in_dim": 8, "out_dim": 32}}
    result = raycache.fill({**cfg, "encoders": [*cfg["encoders"], wide]})
    assert result.encoded_by == {"proj": 0, "wide": 600}
    assert result.reused_rows == 0 and result.encoded_rows == 600
    assert "proj 0, wide 600" in result.summary()
    new, was = embeddings(result.cache), embeddings(old)
    assert all(np.array_equal(new[k], was[k]) for k in new)
    # and the same encoder under another name and input column is still the same encoder
    renamed = {**cfg["encoders"][0], "name": "proj2"}
    result = raycache.fill({**cfg, "encoders": [renamed]})
    assert result.encoded_rows == 0 and result.reused_rows == 600


def test_a_corrupt_shard_is_never_reused_its_rows_are_encoded(first, tmp_path):
    cfg, old = first
    path = old.shard_paths()[0]
    with open(path, "r+b") as f:
        f.seek(200)
        byte = f.read(1)[0]
        f.seek(200)
        f.write(bytes([byte ^ 0xFF]))
    (tmp_path / "v2").mkdir()
    shutil.copy(tmp_path / "v1" / "a.parquet", tmp_path / "v2" / "a.parquet")
    with pytest.warns(UserWarning, match=f"bad shard.*{old.manifest.shards[0].path}.*repair"):
        result = raycache.fill({**cfg, "source": {**cfg["source"], "path": str(tmp_path / "v2")}})
    assert (result.encoded_rows, result.reused_rows) == (150, 450)  # its rows encoded again


def duplicated(tmp_path) -> str:
    table = separable(n=300)
    ids = table.column("id").to_pylist()
    ids[10], ids[250] = ids[5], ids[5]  # row-00005 three times, across two shards
    (tmp_path / "dup").mkdir()
    pq.write_table(table.set_column(0, "id", pa.array(ids)), tmp_path / "dup" / "a.parquet")
    return str(tmp_path / "dup")


def test_duplicate_keys_fail_the_commit_and_name_a_few(tmp_path):
    cfg = toy_fill(duplicated(tmp_path), str(tmp_path / "store"), rows_per_shard=150,
                   in_process=True)
    with pytest.raises(RaycacheError, match=r"1 key\(s\).*row-00005.*source.duplicates"):
        raycache.fill(cfg)
    assert raycache.ls(str(tmp_path / "store")) == []


@pytest.mark.parametrize("keep, row", [("first", 5), ("last", 250)])
def test_duplicate_keys_keep_first_or_last(tmp_path, keep, row):
    cfg = toy_fill(duplicated(tmp_path), str(tmp_path / "store"), rows_per_shard=150,
                   in_process=True)
    cfg["source"]["duplicates"] = keep
    cache = raycache.fill(cfg).cache
    table = cache.read_table()
    assert table.num_rows == 298 and cache.manifest.rows == 298
    assert sorted(set(table.column("id").to_pylist())) == sorted(table.column("id").to_pylist())
    kept = embeddings(cache)["row-00005"]
    features = pq.read_table(tmp_path / "dup" / "a.parquet").column("features")[row].as_py()
    want = projection()(torch.tensor(np.asarray(features, np.float32))).detach().numpy()
    assert np.allclose(kept, want, atol=1e-6)  # the copy the policy keeps, not another


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_reuse_in_the_ray_data_pipeline(ray_session, first, tmp_path):
    cfg, old = first
    (tmp_path / "v2").mkdir()
    shutil.copy(tmp_path / "v1" / "a.parquet", tmp_path / "v2" / "b.parquet")
    result = raycache.fill({**cfg, "source": {**cfg["source"], "path": str(tmp_path / "v2")},
                            "in_process": False})
    assert "encoder task" in result.pool
    assert (result.encoded_rows, result.reused_rows) == (0, 600)
    new, was = embeddings(result.cache), embeddings(old)
    assert all(np.array_equal(new[k], was[k]) for k in new)


def canonical(value, kind: str) -> bytes:
    """The hash of one value as the cache format defines it, written out the slow, plain way
    (a null's: null, never the empty value's)."""
    import hashlib

    if value is None:
        return None
    if kind == "t":
        raw = b"t:" + value.encode()
    elif kind == "b":
        raw = b"b:" + value
    else:
        raw = b"n:" + np.asarray(value, np.float64).tobytes()
    return hashlib.sha256(raw).digest()


@pytest.mark.parametrize("values, kind", [
    (pa.array(["héllo", None, "", "x" * 300]), "t"),
    (pa.array(["a", "bb", "ccc", "dddd"]).slice(1, 2), "t"),
    (pa.array(["q", "r"], pa.large_string()), "t"),
    (pa.array([b"\x00a", None, b""]), "b"),
    (pa.array([[1, 2], [3], []]), "n"),
    (pa.array([[1.5, -2.0], [0.25, 4.0]], pa.list_(pa.float32())), "n"),
    (pa.FixedSizeListArray.from_arrays(pa.array(np.arange(40, dtype=np.float32)), 4).slice(3),
     "n"),
    (pa.chunked_array([pa.array(["a"]), pa.array(["b", "c"])]), "t"),
])
def test_input_hashes_from_flat_buffers_equal_the_per_row_definition(values, kind):
    got = input_hashes(values)
    assert got.type == pa.binary(32) and len(got) == len(values)
    assert got.to_pylist() == [canonical(v, kind) for v in values.to_pylist()]


def test_lookup_finds_the_first_holder_of_each_hash_by_binary_search(tmp_path):
    from raycache._cache.store import Store
    from raycache._fill.reuse import Lookup, Source

    store = Store(str(tmp_path))
    texts = [[f"row {i}" for i in range(0, 50)], [f"row {i}" for i in range(30, 90)]]
    sources = []
    for n, rows in enumerate(texts):
        pq.write_table(pa.table({hash_column("text"): input_hashes(pa.array(rows))}),
                       tmp_path / f"s{n}.parquet")
        sources.append(Source(str(tmp_path), f"s{n}.parquet", "emb", hash_column("text"), None))
    lookup = Lookup(sources, dim=4)
    assert lookup.hashes is None  # nothing is read until a process looks rows up
    lookup.build(store)
    assert len(lookup.hashes) == 90  # distinct hashes only
    query = ["row 10", "row 40", "row 70", "nowhere", "row 40"]
    pos, src, row = lookup.find(input_hashes(pa.array(query)).slice(0))
    assert pos.tolist() == [0, 1, 2, 4]
    assert src.tolist() == [0, 0, 1, 0]  # row 40 is in both shards: the first holds it
    assert row.tolist() == [10, 40, 40, 40]


@pytest.mark.ray
@pytest.mark.timeout(300)
@pytest.mark.parametrize("keep", ["error", "first", "last"])
def test_keys_checked_on_the_cluster_as_on_the_driver(ray_session, tmp_path, monkeypatch, keep):
    """A large fill on Ray checks its keys with Ray Data's group-by (forced here for a small
    one): the same error, the same rows kept and the same label counts as the driver's scan."""
    from raycache._fill import keys

    source = duplicated(tmp_path)
    cfgs = {}
    for where, in_process in (("driver", True), ("cluster", False)):
        cfg = toy_fill(source, str(tmp_path / where), rows_per_shard=150, in_process=in_process,
                       reuse=False)
        cfg["source"]["duplicates"] = keep
        cfgs[where] = cfg
    monkeypatch.setattr(keys, "DRIVER_ROWS", 0)
    monkeypatch.setattr(keys, "SUMMARY_ROWS", 0)  # not the writers' summaries either
    if keep == "error":
        for cfg in cfgs.values():
            with pytest.raises(RaycacheError, match=r"1 key\(s\).*row-00005"):
                raycache.fill(cfg)
        return
    results = {w: raycache.fill(cfg) for w, cfg in cfgs.items()}
    assert "encoder task" in results["cluster"].pool  # the fill ran on Ray
    here, there = results["driver"].cache, results["cluster"].cache
    assert there.manifest.rows == here.manifest.rows == 298
    assert there.manifest.label_stats == here.manifest.label_stats
    assert sum(there.manifest.label_stats["label"]["counts"]) == 298
    a, b = embeddings(here), embeddings(there)
    assert sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)


def test_the_reuse_index_searches_8_byte_prefixes_and_matches_whole_hashes(monkeypatch):
    import importlib

    reuse = importlib.import_module("raycache._fill.reuse")  # raycache.fill is also a function
    rng = np.random.default_rng(0)
    first = rng.bytes(32)
    twin = first[:8] + rng.bytes(24)  # the same first 8 bytes, another hash
    shards = [[first, rng.bytes(32)], [twin, first, rng.bytes(32)]]
    monkeypatch.setattr(reuse, "_read_hashes",
                        lambda store, src: pa.array(shards[src], reuse.HASH))
    lookup = reuse.Lookup([0, 1], dim=4)  # sources: indices into `shards` here
    lookup.build(store=None)
    assert len(lookup.hashes) == 4  # `first` once: its first holder, shard 0 row 0
    assert (np.diff(lookup.prefix.astype(np.float64)) >= 0).all()
    query = [twin, rng.bytes(32), first, first[:8] + rng.bytes(24), shards[0][1]]
    pos, src, row = lookup.find(pa.array(query, reuse.HASH))
    assert pos.tolist() == [0, 2, 4]
    assert list(zip(src.tolist(), row.tolist(), strict=True)) == [(1, 0), (0, 0), (0, 1)]

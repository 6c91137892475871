"""Shard integrity: every whole read checks the manifest's size and sha256, and verify reports
each bad shard and duplicate keys (no Ray: tiny in-process fills)."""

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import torch

import raycache
from raycache import CorruptShard
from raycache._cache.manifests import read_manifest
from raycache._cache.vectors import unpack
from raycache._cli import main
from raycache._train.driver.checks import load_config as load_train
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> Path:
    """A committed 600-row cache in 4 shards, filled once; tests work on copies."""
    root = tmp_path_factory.mktemp("filled")
    (root / "source").mkdir()
    pq.write_table(separable(n=600), root / "source" / "a.parquet")
    raycache.fill(toy_fill(str(root / "source"), str(root / "store"), rows_per_shard=150,
                           in_process=True))
    return root / "store"


@pytest.fixture
def cache(filled, tmp_path) -> raycache.Cache:
    shutil.copytree(filled, tmp_path / "store")
    return raycache.open_cache("toy", str(tmp_path / "store"))


def shard(cache, i: int) -> Path:
    return Path(cache.shard_paths()[i])


def rewrite(cache, i: int, table: pa.Table) -> None:
    """Replace shard i with `table` and record its new size and checksum in the manifest, so
    only what the table itself holds is wrong."""
    pq.write_table(table, shard(cache, i))
    blob = shard(cache, i).read_bytes()
    now = read_manifest(cache.store, cache.dir).to_dict()  # as committed, or as last rewritten
    manifest = {**now, "shard_list": {}, "totals": {}}  # shards inline
    manifest["shards"][i].update(bytes=len(blob), sha256=hashlib.sha256(blob).hexdigest())
    (Path(cache.dir) / "manifest.json").write_text(json.dumps(manifest))


def test_a_flipped_byte_makes_every_whole_read_raise_corrupt_shard_naming_it_and_repair(cache):
    before = cache.read_table()
    assert before.num_rows == 600
    path = shard(cache, 1)
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2] ^= 0x01
    path.write_bytes(bytes(blob))

    for read in (cache.read_table, cache.to_pandas):
        with pytest.raises(CorruptShard) as err:
            read()
        msg = str(err.value)
        assert str(path) in msg and f"toy/{cache.fingerprint}" in msg
        assert f"raycache repair toy --store {cache.store.uri}" in msg and "sha256" in msg
    assert cache.read_table(limit=10).num_rows == 10  # shard 0 alone is sound

    from raycache._train.data.in_memory import InMemory
    from raycache._train.data.rows import load_worker_part
    from raycache._train.data.streamed import Streamed
    from raycache._train.driver.plan import prepare

    _, spec = prepare(load_train({"cache": "toy", "store": {"uri": cache.store.uri},
                                         "num_workers": 0, "placement": "cpu"}))
    assert len(spec.checks) == 4
    with pytest.raises(CorruptShard, match="raycache repair toy"):
        InMemory.for_worker(spec, 0, torch.device("cpu"))
    with pytest.raises(CorruptShard, match=str(path)):
        list(Streamed(spec, 0, False, torch.device("cpu")).batches(64, seed=0))
    unchecked = load_worker_part(dataclasses.replace(spec, checks=()), 0, 1)
    assert unchecked.num_rows == 600  # verify: false reads as before, unchecked


def test_streamed_checks_each_shard_once_per_run(cache, monkeypatch):
    from raycache._fit import part as shares
    from raycache._train.data.streamed import Streamed
    from raycache._train.driver.plan import prepare

    _, spec = prepare(load_train({"cache": "toy", "store": {"uri": cache.store.uri},
                                         "num_workers": 0, "placement": "stream"}))
    checked = []
    real = shares.read_checked
    monkeypatch.setattr(shares, "read_checked",
                        lambda store, path, *a, **k: checked.append(path) or real(store, path,
                                                                                  *a, **k))
    stream = Streamed(spec, 0, False, torch.device("cpu"))
    rows = [sum(len(y) for _, y in stream.batches(64, seed=epoch)) for epoch in range(3)]
    assert rows[0] == rows[1] == rows[2] > 0
    assert sorted(checked) == sorted(cache.shard_paths())  # 3 passes, each shard checked once


def test_verify_names_truncated_missing_misshapen_shards_and_duplicate_keys(cache, capsys):
    store = cache.store.uri
    assert main(["verify", "toy", "--store", store]) == 0
    assert capsys.readouterr().out.startswith(f"OK toy/{cache.fingerprint}: 4 shards, 600 rows")

    rel = [s.path for s in cache.manifest.shards]
    blob = shard(cache, 0).read_bytes()
    shard(cache, 0).write_bytes(blob[: len(blob) // 2])
    shard(cache, 1).unlink()
    third, fourth = (unpack(pq.read_table(shard(cache, i))) for i in (2, 3))
    twin = fourth.column("id")[0].as_py()
    ids = third.column("id").to_pylist()
    rewrite(cache, 2, third.set_column(0, "id", pa.array([twin, *ids[1:]])))
    half = pc.cast(fourth.column("proj"), pa.list_(pa.float16(), 16))
    rewrite(cache, 3, fourth.set_column(fourth.schema.get_field_index("proj"), "proj", half))

    report = raycache.verify(raycache.open_cache("toy", store))
    assert not report.ok and sorted(report.bad) == sorted([rel[0], rel[1], rel[3]])
    assert any("truncated" in r for r in report.bad[rel[0]])
    assert any("footer" in r for r in report.bad[rel[0]])
    assert report.bad[rel[1]] == ["missing"]
    [misshapen] = report.bad[rel[3]]
    assert misshapen.startswith("column 'proj' is fixed_size_list") and "halffloat" in misshapen
    assert misshapen.endswith("expected a fixed-size list of 16 float32")
    assert report.duplicate_keys.count == 1
    assert report.duplicate_keys.examples == {twin: [rel[2], rel[3]]}

    assert main(["verify", f"toy/{cache.fingerprint}", "--store", store]) == 1
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    for i in (0, 1, 3):
        assert sum(line.startswith(f"BAD {rel[i]}: ") for line in lines) == 1
    assert any(line.startswith("DUPLICATE KEYS: 1 keys") and repr(twin) in line
               for line in lines)
    assert f"raycache repair toy --store {store}" in captured.err

"""The manifest commit is exclusive: two fills of one cache at once end with one committed
cache that both report (one as the fill, one as a hit), on a local folder and on S3."""

import hashlib
import threading

import pyarrow.parquet as pq
import pytest

import raycache
from raycache._cache.store import Store
from raycache._fill.plan import load_config as load_fill
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(180)


def fill_twice_at_once(cfg: dict) -> list:
    """Two fills of the same config started together, each in its own thread."""
    start = threading.Barrier(2)
    results: list = [None, None]

    def run(i: int) -> None:
        start.wait()
        results[i] = raycache.fill(cfg)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(150)
    return results


def check_one_commit(results: list, store: Store) -> None:
    assert all(r is not None for r in results), "a fill did not finish"
    assert sorted(r.hit for r in results) == [False, True]  # one fill, one hit
    (a, b) = (r.cache for r in results)
    assert a.fingerprint == b.fingerprint and a.manifest.to_dict() == b.manifest.to_dict()
    names = store.listdir(store.cache_dir("toy", a.fingerprint))
    assert "manifest.json" in names and "_progress" not in names
    assert not [n for n in names if ".tmp-" in n]  # nothing half-written beside it
    assert raycache.verify(a).stray == {}  # nor any file the manifest does not name
    for shard in a.manifest.shards:  # every listed shard is the bytes the manifest describes
        data = store.read_bytes(f"{a.dir}/{shard.path}")
        assert len(data) == shard.bytes and hashlib.sha256(data).hexdigest() == shard.sha256
    assert a.read_table().num_rows == 600


def slow(cfg: dict) -> dict:
    """Each forward pass sleeps, so both fills are encoding when the first commits."""
    enc = {**cfg["encoders"][0], "factory": "toy_encoders:slow_projection",
           "kwargs": {"in_dim": 8, "out_dim": 16, "delay": 0.2}}
    return {**cfg, "encoders": [enc], "in_process": True}


def test_two_fills_at_once_on_a_local_folder_commit_once(tmp_path):
    (tmp_path / "src").mkdir()
    pq.write_table(separable(n=600), tmp_path / "src" / "a.parquet")
    cfg = slow(toy_fill(str(tmp_path / "src"), str(tmp_path / "store"), rows_per_shard=150))
    check_one_commit(fill_twice_at_once(cfg), Store(str(tmp_path / "store")))


@pytest.mark.s3
def test_two_fills_at_once_on_s3_commit_once(bucket, tmp_path):
    (tmp_path / "src").mkdir()
    pq.write_table(separable(n=600), tmp_path / "src" / "a.parquet")
    cfg = slow(toy_fill(str(tmp_path / "src"), f"{bucket}/caches", rows_per_shard=150))
    check_one_commit(fill_twice_at_once(cfg), Store(f"{bucket}/caches"))


def test_exclusive_write_never_replaces_what_is_there(tmp_path):
    store = Store(str(tmp_path))
    path = store.path("x", "manifest.json")
    assert store.write_atomic(path, b"first", exclusive=True)
    assert not store.write_atomic(path, b"second", exclusive=True)
    assert store.read_bytes(path) == b"first"
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == ["manifest.json"]


def test_a_commit_leaves_another_fills_temporary_shard_list_alone(tmp_path):
    """The committing fill clears old shard lists, but never another fill's half-written one
    (a `.tmp-` file that fill is about to rename: removing it broke that fill)."""
    from raycache._fill.plan import plan

    (tmp_path / "src").mkdir()
    pq.write_table(separable(n=200), tmp_path / "src" / "a.parquet")
    cfg = {**toy_fill(str(tmp_path / "src"), str(tmp_path / "store")), "in_process": True}
    folder = tmp_path / "store" / plan(load_fill(cfg)).dir.rpartition("/store/")[2]
    folder.mkdir(parents=True)
    other = folder / "shards-0123456789abcdef.json.tmp-5f1e"  # another fill, mid-write
    stale = folder / "shards-fedcba9876543210.json"  # a listing no manifest names
    other.write_text("[]\n")
    stale.write_text("[]\n")
    result = raycache.fill(cfg)
    assert not result.hit
    assert other.exists() and not stale.exists()
    assert result.cache.read_table().num_rows == 200



def test_a_local_write_survives_its_folder_being_removed_meanwhile(tmp_path, monkeypatch):
    """A fill that commits clears _progress/ while another fill of the cache may still write a
    record into it: the write makes the folder again (as on S3, where there is no folder).
    The removal is put where CI met it: after the temporary file is written, before its rename
    (twice: the committing fill retries its removal)."""
    import os
    import shutil

    store = Store(str(tmp_path))
    folder = tmp_path / "toy" / "_progress"
    rename = os.replace
    removals = []

    def removed_first(src, dst):
        if len(removals) < 2:
            removals.append(src)
            shutil.rmtree(folder)
        return rename(src, dst)

    monkeypatch.setattr(os, "replace", removed_first)
    assert store.write_atomic(str(folder / "part-0.json"), b"{}\n")
    assert len(removals) == 2 and (folder / "part-0.json").read_bytes() == b"{}\n"
    assert sorted(p.name for p in folder.iterdir()) == ["part-0.json"]

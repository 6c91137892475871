"""Races on a store: gc never removes the folder of a fill in progress (its lease), whatever the
grace, while a stale lease protects nothing; a fill whose folder is removed under it fails with
a StoreError that says to run it again, and running it again commits (no Ray)."""

import os
import shutil
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import toy_encoders

import raycache
from raycache import StoreError
from raycache._cache.lease import LEASES, STALE_S, Lease
from raycache._cache.store import PROGRESS, Store
from tests.conftest import separable, toy_fill
from tests.faults import wait_for

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def gate(monkeypatch) -> threading.Event:
    """A fresh gate for gated_projection: its second forward pass waits until the test opens
    it (opened at the end either way)."""
    event = threading.Event()
    monkeypatch.setattr(toy_encoders, "GATE", event)
    yield event
    event.set()


def config(tmp_path: Path) -> dict:
    """An in-process fill of 60 rows in two shards, held between them by the gate."""
    if not (tmp_path / "source").exists():
        (tmp_path / "source").mkdir()
        pq.write_table(separable(n=60), tmp_path / "source" / "a.parquet")
    enc = {"name": "proj", "kind": "torch", "input": "features",
           "factory": "toy_encoders:gated_projection",
           "kwargs": {"in_dim": 8, "out_dim": 16, "after": 1, "timeout": 60.0}}
    return toy_fill(str(tmp_path / "source"), str(tmp_path / "store"), rows_per_shard=30,
                    block_rows=30, in_process=True, encoders=[enc])


class Filling:
    """raycache.fill in a thread; `wait()` gives its result or raises its error."""

    def __init__(self, cfg: dict):
        self.result, self.error = None, None
        self.thread = threading.Thread(target=self._run, args=(cfg,), daemon=True)
        self.thread.start()

    def _run(self, cfg: dict) -> None:
        try:
            self.result = raycache.fill(cfg)
        except BaseException as exc:  # handed to the test
            self.error = exc

    def wait(self) -> raycache.FillResult:
        self.thread.join(90)
        assert not self.thread.is_alive(), "the fill did not finish"
        if self.error is not None:
            raise self.error
        return self.result


def first_shard(store: Path) -> Path:
    """The cache folder of the fill under way, once its first shard's record is written."""
    assert wait_for(lambda: any(store.glob(f"toy/*/{PROGRESS}/*.json")), 60)
    return next(store.glob(f"toy/*/{PROGRESS}/*.json")).parent.parent


@pytest.mark.parametrize("grace", ["0s", "1s"])
def test_gc_leaves_the_folder_of_a_fill_in_progress(tmp_path, gate, grace):
    store = tmp_path / "store"
    filling = Filling(config(tmp_path))
    folder = first_shard(store)
    time.sleep(1.1)  # past a grace of 1s too: only the lease protects it
    result = raycache.gc(str(store), grace=grace, delete=True)
    assert not result.removed and (folder / PROGRESS).exists()
    [kept] = result.kept
    assert kept.usage.dir == str(folder) and "a fill is writing it" in kept.reason
    gate.set()
    done = filling.wait()
    assert done.cache.dir == str(folder) and done.cache.manifest.rows == 60
    assert raycache.verify(done.cache).ok and not (folder / LEASES).exists()


def test_a_stale_lease_does_not_protect(tmp_path):
    """An unfinished fill's folder with a lease last written longer ago than STALE_S (its
    fill died) goes like any unfinished fill; a fresh lease keeps it."""
    folder = tmp_path / "store" / "toy" / "0123456789abcdef01234567"
    (folder / "shards").mkdir(parents=True)
    (folder / "shards" / "part-x.parquet").write_bytes(b"x" * 100)
    store = Store(str(tmp_path / "store"))
    with Lease(store, str(folder)) as lease:
        kept = raycache.gc(store, grace="0s", delete=True)
        assert not kept.removed and folder.exists()
        old = time.time() - STALE_S - 60
        os.utime(lease.path, (old, old))
        gone = raycache.gc(store, grace="0s", delete=True)
        assert [r.usage.dir for r in gone.removed] == [str(folder)]
        assert not folder.exists() and lease.lost


def test_a_fill_whose_folder_is_removed_fails_and_runs_again(tmp_path, gate):
    store = tmp_path / "store"
    filling = Filling(config(tmp_path))
    folder = first_shard(store)
    shutil.rmtree(folder)
    gate.set()
    with pytest.raises(StoreError, match="was removed while the fill ran") as err:
        filling.wait()
    assert "Run the fill again" in str(err.value) and str(folder) in str(err.value)
    assert not (folder / "manifest.json").exists()
    again = raycache.fill(config(tmp_path))
    assert not again.hit and raycache.verify(again.cache).ok


def test_a_held_lease_is_written_again_and_stops_where_its_folder_went(tmp_path):
    folder = tmp_path / "store" / "toy" / "0123456789abcdef01234567"
    store = Store(str(tmp_path / "store"))
    with Lease(store, str(folder), period_s=0.05) as lease:
        old = time.time() - STALE_S - 60
        os.utime(lease.path, (old, old))
        assert wait_for(lambda: os.path.getmtime(lease.path) > old + 60, 30)
        shutil.rmtree(folder)
        assert wait_for(lambda: not lease._thread.is_alive(), 30)
        assert lease.lost and not folder.exists()  # never made again


def test_a_damaged_manifest_that_appears_during_a_fill_is_replaced_by_its_commit(tmp_path,
                                                                                 gate):
    filling = Filling(config(tmp_path))
    folder = first_shard(tmp_path / "store")
    (folder / "manifest.json").write_text('{"format_version": 3, "na')
    gate.set()
    done = filling.wait()
    assert not done.hit and done.cache.manifest.rows == 60
    assert raycache.verify(raycache.open_cache("toy", str(tmp_path / "store"))).ok

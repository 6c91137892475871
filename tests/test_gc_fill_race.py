"""gc and a fill that cannot race: a fill checks, just before its commit, that every shard file
it shares from older versions is still there (else it fails cleanly and the next run encodes
those rows), and gc reads a name's leases and manifests again before it removes each version,
so a fill that starts (or commits) after gc looked keeps every file it may share (no Ray)."""

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raycache
import raycache._upkeep.gc as gc_module
from raycache._cache.lease import Lease
from raycache._cache.store import Store
from raycache._source import files as sources
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def src(tmp_path) -> Path:
    folder = tmp_path / "source"
    folder.mkdir()
    table = separable(n=400)
    for i, name in enumerate("ab"):
        pq.write_table(table.slice(200 * i, 200), folder / f"{name}.parquet", row_group_size=50)
    return folder


def config(src: Path, tmp_path: Path) -> dict:
    return toy_fill(str(src), str(tmp_path / "store"), rows_per_shard=50, in_process=True)


def edit(path: Path, row: int) -> None:
    data = pq.read_table(path).to_pydict()
    data["label"][row] = (data["label"][row] + 1) % 3
    pq.write_table(pa.table(data, schema=pq.read_schema(path)), path, row_group_size=50)


def rows(cache: raycache.Cache) -> pa.Table:
    return cache.read_table(["id", "label", "proj"]).sort_by("id")


def test_a_fill_whose_shared_files_go_before_its_commit_fails_cleanly(src, tmp_path,
                                                                       monkeypatch):
    cfg = config(src, tmp_path)
    v1 = raycache.fill(cfg).cache
    edit(src / "b.parquet", 3)
    check = sources.check_unchanged

    def gc_meanwhile(files, options, what):  # gc's sweep, after a look that saw no lease
        if what == "nothing was committed":  # the check just before the commit
            (Path(v1.dir) / "manifest.json").unlink()  # the manifest first, as gc does
            shutil.rmtree(v1.dir)
        return check(files, options, what)
    monkeypatch.setattr(sources, "check_unchanged", gc_meanwhile)
    with pytest.raises(raycache.StoreError, match="were removed while it ran") as err:
        raycache.fill(cfg)
    assert f"toy/{v1.fingerprint}" in str(err.value) and "Run the fill again" in str(err.value)
    assert raycache.ls(str(tmp_path / "store")) == []  # nothing committed over them
    assert not list((tmp_path / "store").rglob("_leases/*"))  # nor a lease left to go stale
    monkeypatch.undo()
    again = raycache.fill(cfg)  # the rows it shared are encoded anew
    assert not again.hit and again.shared_rows == 0 and raycache.verify(again.cache).ok
    whole = raycache.fill({**cfg, "name": "whole", "share": False, "reuse": False}).cache
    assert rows(again.cache).equals(rows(whole))


@pytest.mark.parametrize("started", ["leased", "committed"])
def test_gc_keeps_the_files_of_a_fill_that_starts_after_it_looked(src, tmp_path, monkeypatch,
                                                                   started):
    cfg = config(src, tmp_path)
    store = tmp_path / "store"
    raycache.fill(cfg)
    edit(src / "b.parquet", 3)
    v2 = raycache.fill(cfg).cache
    edit(src / "b.parquet", 60)
    unknown, late = gc_module.unknown, {}  # (raycache._upkeep.policies)

    def fill_starts(*args, **kwargs):  # gc has looked: no lease, no third version
        out = unknown(*args, **kwargs)
        if started == "leased":  # a fill planning a new version, its lease written
            late["lease"] = Lease(Store(str(store)), f"{store}/toy/{'f' * 24}").__enter__()
        else:  # a whole fill that shares v2's files, committed before gc sweeps
            late["v3"] = raycache.fill(cfg).cache
        return out
    monkeypatch.setattr(gc_module, "unknown", fill_starts)
    result = raycache.gc(str(store), retain=0, include_newest=True, delete=True)
    monkeypatch.undo()
    shared = [s for s in v2.manifest.shards if s.home] + list(v2.manifest.shards)
    assert shared and all((store / (s.home or f"toy/{v2.fingerprint}") / s.path).exists()
                          for s in shared)  # every shard file of the name stays
    assert "after gc looked" in "\n".join(result.lines())
    if started == "leased":
        late["lease"].__exit__(None, None, None)
    else:
        v3 = late["v3"]
        assert any(s.home for s in v3.manifest.shards)  # it shares older versions' files
        newest = raycache.open_cache("toy", str(store))
        assert newest.fingerprint == v3.fingerprint and raycache.verify(newest).ok
        assert rows(newest).num_rows == 400


def test_a_run_in_progress_keeps_the_files_of_the_shard_list_it_started_on(src, tmp_path):
    """A run reads the shard list it found when it started: a compaction of its version since
    then stops naming the older version's files it copied, but gc keeps them while the run
    is in progress, and removes them once it is not."""
    import json
    import os
    import socket

    cfg = {**config(src, tmp_path), "compact_below": 0}
    store = tmp_path / "store"
    v1 = raycache.fill(cfg).cache
    data = pq.read_table(src / "a.parquet").to_pydict()
    for i in range(0, 200, 2):  # half of a's rows edited: its shards shared in part
        data["features"][i] = [x + 1.0 for x in data["features"][i]]
    pq.write_table(pa.table(data, schema=pq.read_schema(src / "b.parquet")), src / "a.parquet",
                   row_group_size=50)
    v2 = raycache.fill(cfg).cache
    read = {(s.home, s.path) for s in v2.manifest.shards if s.home}
    run = Path(v2.dir) / "runs" / "r1"
    run.mkdir(parents=True)
    record = {"status": "running", "host": socket.gethostname(), "pid": os.getpid(),
              "started": "2020-01-01T00:00:00+00:00", "updated": "now"}
    (run / "run.json").write_text(json.dumps(record))
    raycache.compact("toy", str(store), below=0.9, progress=False)  # committed again since
    sparse = [store / home / path for home, path in read
              if (home, path) not in {(s.home, s.path) for s in raycache.open_cache(
                  "toy", str(store)).manifest.shards}]
    assert sparse and all(p.exists() for p in sparse)
    result = raycache.gc(str(store), retain=1, delete=True)
    assert [r.usage.fingerprint for r in result.removed] == [v1.fingerprint]
    assert "started before its last commit" in "\n".join(result.lines())
    assert all(p.exists() for p in sparse)  # the run may still read them
    (run / "run.json").write_text(json.dumps({**record, "status": "finished"}))
    raycache.gc(str(store), retain=1, delete=True, grace="0")  # v1's folder: files alone
    assert not any(p.exists() for p in sparse)
    assert raycache.verify(raycache.open_cache("toy", str(store))).ok

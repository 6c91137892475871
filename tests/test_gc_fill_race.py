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
    unknown, late = gc_module._unknown, {}

    def fill_starts(*args, **kwargs):  # gc has looked: no lease, no third version
        out = unknown(*args, **kwargs)
        if started == "leased":  # a fill planning a new version, its lease written
            late["lease"] = Lease(Store(str(store)), f"{store}/toy/{'f' * 24}").__enter__()
        else:  # a whole fill that shares v2's files, committed before gc sweeps
            late["v3"] = raycache.fill(cfg).cache
        return out
    monkeypatch.setattr(gc_module, "_unknown", fill_starts)
    result = raycache.gc(str(store), keep_last=0, include_newest=True, delete=True)
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

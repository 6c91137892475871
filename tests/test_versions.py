"""Versions that share storage: a new version of a cache refers to the still-valid rows of the
last one instead of copying them, writes shards only for changed or new rows, and reads, trains
and counts exactly as the same rows written whole."""

import dataclasses
import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raycache
from raycache._cache import entry_rows
from raycache._cache.records import RowRange, ShardEntry
from raycache._cache.selection import decode, encode
from raycache._cache.store import Store
from raycache._cli import main
from raycache._fill.versions import compaction
from raycache._source import files as sources
from tests.conftest import separable, toy_fill
from tests.faults import Driver, wait_for

pytestmark = pytest.mark.timeout(300)

ROWS = 600


@pytest.fixture
def source(tmp_path) -> Path:
    """600 rows in three files of 200, row groups of 50."""
    folder = tmp_path / "source"
    folder.mkdir()
    table = separable(n=ROWS)
    for i, name in enumerate("abc"):
        pq.write_table(table.slice(200 * i, 200), folder / f"{name}.parquet", row_group_size=50)
    return folder


def config(source: Path, tmp_path: Path, **over) -> dict:
    return toy_fill(str(source), str(tmp_path / "store"), **{"rows_per_shard": 50,
                                                             "in_process": True, **over})


def rewrite(path: Path, change) -> None:
    """Rewrite a source file in place with change(columns as lists) applied; a new mtime."""
    table = pq.read_table(path)
    data = table.to_pydict()
    change(data)
    time.sleep(0.01)
    pq.write_table(pa.table(data, schema=table.schema), path, row_group_size=50)


def whole(cfg: dict) -> raycache.Cache:
    """The same source filled whole, under another name, encoding every row."""
    return raycache.fill({**cfg, "name": "whole", "share": False, "reuse": False}).cache


def by_key(cache: raycache.Cache) -> pa.Table:
    return cache.read_table().sort_by("id")


def assert_same_rows(a: raycache.Cache, b: raycache.Cache) -> None:
    x, y = by_key(a), by_key(b)
    assert x.column("id").equals(y.column("id"))
    for c in ("label", "name"):
        assert x.column(c).to_pylist() == y.column(c).to_pylist()
    ex = np.stack(x.column("proj").to_numpy(zero_copy_only=False))
    ey = np.stack(y.column("proj").to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(ex, ey, rtol=1e-5, atol=1e-6)  # batch sizes differ (BLAS)
    assert a.manifest.label_stats == b.manifest.label_stats
    assert a.manifest.rows == b.manifest.rows


def own_bytes(cache: raycache.Cache) -> int:
    return sum(p.stat().st_size for p in Path(cache.dir).rglob("*.parquet"))


def test_selection_round_trip_is_compact():
    rng = np.random.default_rng(0)
    mask = rng.random(8192) > 0.01
    text = encode(mask)
    assert np.array_equal(decode(text, 8192), mask) and len(text) < 1500
    assert len(encode(np.ones(8192, bool))) < 40
    with pytest.raises(ValueError, match="8192"):
        decode(text, 9000)


def test_an_entrys_rows_and_file_are_answered_wherever_it_lives(tmp_path):
    own = ShardEntry("shards/p1.parquet", 10, 100, "0" * 64, "src", (RowRange("b", 0, 10),))
    mask = np.arange(10) % 3 != 0
    shared = entry_rows.keeping(entry_rows.shared_from(own, "toy/aaa"), mask)
    store = Store(str(tmp_path))
    assert (shared.rows, shared.file_rows, entry_rows.is_shared(shared)) == (6, 10, True)
    assert entry_rows.file_path(store, "ignored", shared) == \
        f"{store.path('toy/aaa')}/shards/p1.parquet"
    assert entry_rows.file_path(store, "mine", own) == "mine/shards/p1.parquet"
    assert entry_rows.label(shared) == "toy/aaa/shards/p1.parquet"
    assert entry_rows.label(own) == "shards/p1.parquet"
    assert np.array_equal(entry_rows.kept_index(shared), np.flatnonzero(mask))
    assert np.array_equal(entry_rows.kept_index(own), np.arange(10))
    table = pa.table({"k": list(range(10))})
    assert entry_rows.take_kept(shared, table).column("k").to_pylist() == [1, 2, 4, 5, 7, 8]
    assert entry_rows.take_kept(own, table) is table
    assert entry_rows.selection(shared) == (shared.keep, 10) and not entry_rows.reads_whole(shared)
    kept, problems = entry_rows.selection_problems(shared)
    assert np.array_equal(kept, mask) and problems == []
    whole = entry_rows.whole_file(shared)
    assert entry_rows.reads_whole(whole) and not entry_rows.is_shared(whole) and whole.rows == 10
    assert entry_rows.keeping(own, np.ones(10, bool)) == own  # all kept: no selection
    with pytest.raises(entry_rows.BadSelection, match="16 bits for a shard of 20 rows"):
        entry_rows.kept_index(dataclasses.replace(shared, stored=20))


def test_an_edited_file_writes_only_its_changed_rows(source, tmp_path):
    cfg = config(source, tmp_path)
    v1 = raycache.fill(cfg)

    def edit(d):  # 5 inputs changed, 5 labels changed (inputs as they were)
        for i in range(5):
            d["features"][i] = [x + 1.0 for x in d["features"][i]]
        for i in range(100, 105):
            d["label"][i] = (d["label"][i] + 1) % 3
    rewrite(source / "b.parquet", edit)
    v2 = raycache.fill(cfg)
    assert v2.cache.fingerprint != v1.cache.fingerprint and v2.base == v1.cache.fingerprint
    assert (v2.encoded_rows, v2.reused_rows, v2.shared_rows) == (5, 5, 590)
    assert "590 shared with version" in v2.summary()
    shards = list(v2.cache.manifest.shards)
    assert {s.home for s in shards if s.home} == {f"toy/{v1.cache.fingerprint}"}
    assert sum(s.rows for s in shards if s.home) == 590
    kept = [s for s in shards if s.keep]  # the two shards of b that lost rows
    assert len(kept) == 2 and all(s.rows == 45 and s.file_rows == 50 for s in kept)
    assert own_bytes(v2.cache) < 0.05 * own_bytes(v1.cache)
    assert_same_rows(v2.cache, whole(cfg))
    assert raycache.verify(v2.cache).ok


def test_unchanged_files_are_not_read_again(source, tmp_path, monkeypatch):
    cfg = config(source, tmp_path)
    raycache.fill(cfg)
    extra = separable(n=60, seed=4).to_pydict()
    extra["id"] = [f"new-{i}" for i in range(60)]
    pq.write_table(pa.table(extra, schema=pq.read_schema(source / "a.parquet")),
                   source / "d.parquet")
    read, opened = sources.read_unit, []

    def spy(u, *args, **kwargs):
        opened.append(Path(u.file.uri).name)
        return read(u, *args, **kwargs)
    monkeypatch.setattr(sources, "read_unit", spy)
    v2 = raycache.fill(cfg)
    assert set(opened) == {"d.parquet"}  # the new file only: matched, then encoded
    assert (v2.encoded_rows, v2.shared_rows) == (60, ROWS)
    monkeypatch.undo()
    assert_same_rows(v2.cache, whole(cfg))


@pytest.mark.parametrize(("compact_below", "counts"), [(0.5, (0, 0, 400, 10)),
                                                      (0, (0, 0, 410, 0))])
def test_a_removed_file_and_a_moved_row(source, tmp_path, compact_below, counts):
    cfg = config(source, tmp_path, compact_below=compact_below)
    raycache.fill(cfg)
    moved = pq.read_table(source / "c.parquet").slice(0, 10)
    os.remove(source / "c.parquet")
    rewrite(source / "a.parquet", lambda d: [d[k].extend(moved.column(k).to_pylist())
                                             for k in d])
    v2 = raycache.fill(cfg)
    # c's first shard keeps only its 10 moved rows: under compact_below, they are copied into
    # a shard of the version; with compaction off, shared with a selection
    assert (v2.encoded_rows, v2.reused_rows, v2.shared_rows, v2.compacted_rows) == counts
    assert v2.cache.manifest.rows == 410
    assert_same_rows(v2.cache, whole(cfg))


def test_a_chain_of_versions_compacts_sparse_shards_and_reads_the_same(source, tmp_path):
    cfg = config(source, tmp_path, compact_below=0.8, compact_budget=1.0)
    raycache.fill(cfg)
    rng = np.random.default_rng(1)
    for step in range(4):  # 8 of each 50-row shard's rows edited per version, in every file
        for name in "abc":
            def edit(d, step=step):
                for i in rng.choice(200, 32, replace=False):
                    d["features"][i] = [x + 0.5 * (step + 1) for x in d["features"][i]]
            rewrite(source / f"{name}.parquet", edit)
        last = raycache.fill(cfg)
    shards = list(last.cache.manifest.shards)
    assert all(s.rows >= 0.8 * s.file_rows for s in shards if s.keep)
    assert last.encoded_rows == 96 and last.reused_rows == 0 and last.compacted_rows > 0
    assert f"{last.compacted_rows} compacted" in last.summary()
    assert_same_rows(last.cache, whole(cfg))
    assert raycache.verify(last.cache).ok


def test_compaction_takes_the_sparsest_shards_within_its_budget():
    def entry(rows: int, stored: int = 100) -> ShardEntry:
        return ShardEntry(f"shards/{rows}.parquet", rows, 1, "0" * 64, "s",
                          keep="k" if rows < stored else "", stored=stored, home="v/1")
    carried = [entry(r) for r in (100, 95, 85, 70, 80, 40, 100, 100, 100, 100)]  # 870 rows
    cfg = SimpleNamespace(compact_below=0.9, compact_budget=0.2, rows_per_shard=100)
    p = SimpleNamespace(cfg=cfg, files=[])
    kept, sparse = compaction(p, carried)
    # under half always goes (40), then the sparsest below 0.9 while 20% of 870 rows allow
    assert [e.rows for e in sparse] == [40, 70] and len(kept) == 8
    assert [e.rows for e in compaction(p, carried, budget=1.0)[1]] == [40, 70, 80, 85]
    assert compaction(SimpleNamespace(cfg=SimpleNamespace(**{**vars(cfg), "compact_below": 0}),
                                      files=[]), carried) == (carried, [])


def test_a_new_key_that_collides_with_a_kept_one_takes_a_whole_fill(source, tmp_path):
    cfg = config(source, tmp_path)
    cfg["source"]["duplicates"] = "first"
    raycache.fill(cfg)
    dup = pq.read_table(source / "a.parquet").slice(0, 3)  # keys of a.parquet again, in d
    pq.write_table(dup, source / "d.parquet")
    v2 = raycache.fill(cfg)
    assert v2.base == "" and v2.shared_rows == 0 and v2.cache.manifest.rows == ROWS
    assert not any(s.home for s in v2.cache.manifest.shards)
    assert_same_rows(v2.cache, whole(cfg))


def test_a_version_whose_older_folder_was_removed_by_hand_is_filled_whole(source, tmp_path):
    cfg = config(source, tmp_path)
    v1 = raycache.fill(cfg)
    rewrite(source / "b.parquet", lambda d: d["label"].__setitem__(0, 2 - d["label"][0]))
    v2 = raycache.fill(cfg)
    rewrite(source / "c.parquet", lambda d: d["label"].__setitem__(0, 2 - d["label"][0]))
    import shutil

    shutil.rmtree(v1.cache.dir)
    report = raycache.verify(v2.cache)
    assert not report.ok and v1.cache.fingerprint in " ".join(report.lines())
    with pytest.warns(raycache.DamagedCacheWarning, match="missing"):
        v3 = raycache.fill(cfg)  # v2 is no base: its shared shards are gone; a whole fill
    assert v3.base == "" and raycache.verify(v3.cache).ok
    assert_same_rows(v3.cache, whole(cfg))


def test_repair_of_a_version_whose_older_folder_was_removed_re_encodes_only_those_rows(
        source, tmp_path):
    cfg = config(source, tmp_path)
    v1 = raycache.fill(cfg)
    rewrite(source / "b.parquet", lambda d: d["label"].__setitem__(0, 2 - d["label"][0]))
    v2 = raycache.fill(cfg)
    lost = sum(s.rows for s in v2.cache.manifest.shards if s.home)
    import shutil

    shutil.rmtree(v1.cache.dir)
    report = raycache.verify(v2.cache)
    assert set(report.shared.values()) == {f"toy/{v1.cache.fingerprint}"}
    fixed = raycache.repair("toy", str(tmp_path / "store"), v2.cache.fingerprint,
                            progress=False)
    assert fixed.repair and fixed.encoded_rows == lost == 599
    assert fixed.cache.fingerprint == v2.cache.fingerprint
    assert not any(s.home for s in fixed.cache.manifest.shards)
    assert raycache.verify(fixed.cache).ok
    assert fixed.cache.manifest.label_stats == v2.cache.manifest.label_stats
    assert_same_rows(fixed.cache, whole(cfg))


def test_compact_on_demand_rewrites_the_sparse_shared_shards(source, tmp_path):
    cfg = config(source, tmp_path, compact_below=0)  # fills never compact
    raycache.fill(cfg)
    rewrite(source / "a.parquet", lambda d: [d["features"].__setitem__(
        i, [x + 1.0 for x in d["features"][i]]) for i in range(0, 200) if i % 50 < 30])
    v2 = raycache.fill(cfg)
    sparse = [s for s in v2.cache.manifest.shards if s.keep]
    assert len(sparse) == 4 and all(s.rows == 20 for s in sparse)
    assert main(["compact", "toy", "--store", str(tmp_path / "store"), "--below", "0.5"]) == 0
    after = raycache.open_cache("toy", str(tmp_path / "store"))
    assert after.fingerprint == v2.cache.fingerprint
    assert not any(s.keep for s in after.manifest.shards)
    assert after.manifest.rows == ROWS and raycache.verify(after).ok
    assert_same_rows(after, whole(cfg))
    again = raycache.compact("toy", str(tmp_path / "store"), below=0.5, progress=False)
    assert again.hit  # nothing left to compact


def test_a_crash_between_the_shard_list_and_the_manifest_commits_on_the_next_run(
        source, tmp_path, monkeypatch):
    cfg = config(source, tmp_path)
    raycache.fill(cfg)
    rewrite(source / "a.parquet", lambda d: d["features"].__setitem__(
        0, [x + 1.0 for x in d["features"][0]]))
    write = Store.write_json

    def crash(self, path, obj, *args, **kwargs):
        if path.endswith("/manifest.json"):
            raise KeyboardInterrupt("killed after the shard list, before the manifest")
        return write(self, path, obj, *args, **kwargs)
    monkeypatch.setattr(Store, "write_json", crash)
    with pytest.raises(KeyboardInterrupt):
        raycache.fill(cfg)
    monkeypatch.undo()
    p = raycache.fill(cfg)
    assert not p.hit and p.encoded_rows == 0 and p.resumed_rows == 1 and p.shared_rows == 599
    assert_same_rows(p.cache, whole(cfg))


def test_a_version_killed_mid_fill_resumes_at_the_row(source, tmp_path):
    """A real kill (SIGKILL of the driver's process group) while the version writes shards."""
    cfg = config(source, tmp_path)
    cfg["encoders"][0].update(factory="toy_encoders:slow_projection",
                              kwargs={"in_dim": 8, "out_dim": 16, "delay": 1.0})
    raycache.fill({**cfg, "in_process": True})
    for name in "abc":  # 40 rows to encode per file: 50-row blocks, a second each
        rewrite(source / f"{name}.parquet", lambda d: [d["features"].__setitem__(
            i, [x + 1.0 for x in d["features"][i]]) for i in range(0, 200, 5)])
    records = lambda: list((tmp_path / "store" / "toy").glob("*/_progress/*.json"))  # noqa: E731
    driver = Driver(f"import raycache; raycache.fill({cfg!r})", log=tmp_path / "driver.log",
                    env={"PYTHONPATH": os.pathsep.join([str(Path(__file__).parent),
                                                        os.environ.get("PYTHONPATH", "")])})
    try:
        assert wait_for(lambda: len(records()) >= 1, timeout=240), \
            (tmp_path / "driver.log").read_text()[-3000:]
    finally:
        driver.kill()
    done = sum(json.loads(r.read_text())["rows"] for r in records())
    assert 0 < done < 120
    result = raycache.fill(cfg)
    assert result.resumed_rows == done and result.encoded_rows == 120 - done
    assert_same_rows(result.cache, whole({**cfg, "encoders": [{
        **cfg["encoders"][0], "kwargs": {"in_dim": 8, "out_dim": 16, "delay": 0.0}}]}))


def test_training_on_a_shared_version_equals_training_on_the_rows_written_whole(
        source, tmp_path):
    cfg = config(source, tmp_path)
    raycache.fill(cfg)
    rewrite(source / "b.parquet", lambda d: [d["features"].__setitem__(
        i, [x * 0.9 for x in d["features"][i]]) for i in range(0, 200, 7)])
    rewrite(source / "c.parquet", lambda d: [d["label"].__setitem__(
        i, (d["label"][i] + 1) % 3) for i in range(0, 200, 11)])
    v2 = raycache.fill(cfg)
    assert any(s.keep for s in v2.cache.manifest.shards)
    w = whole(cfg)
    runs = {}
    for name in ("toy", "whole"):  # one batch an epoch: the same rows give the same steps
        for placement in ("cpu", "stream"):
            runs[name, placement] = raycache.train({
                "cache": name, "store": {"uri": str(tmp_path / "store")}, "epochs": 3,
                "lr": 0.1, "batch_size": 1024, "num_workers": 0, "placement": placement,
                "progress": False, "run_name": f"{name}-{placement}"})
    for placement, tolerance in (("cpu", 1e-5), ("stream", 0.05)):
        # in memory, one batch of the same rows is the same step; streamed, batches are cut
        # per shard, and the version's shards hold its rows in another order
        a, b = runs["toy", placement], runs["whole", placement]
        assert a.spec.rows == b.spec.rows == w.manifest.rows
        for x, y in zip(a.history, b.history, strict=True):
            assert x["val_loss"] == pytest.approx(y["val_loss"], abs=tolerance)
            assert x["val_acc"] == pytest.approx(y["val_acc"], abs=max(tolerance, 1e-6))


@pytest.mark.ray
def test_a_version_on_the_ray_data_pipeline(ray_session, source, tmp_path):
    """Forced onto Ray Data (a cluster of several nodes takes that path): the version's reuse
    and what it shares travel to the actors; the same rows as in-process."""
    cfg = config(source, tmp_path, in_process=False)
    raycache.fill(cfg)

    def edit(d):
        for i in range(0, 200, 20):
            d["features"][i] = [x - 1.0 for x in d["features"][i]]
        d["label"][1] = (d["label"][1] + 1) % 3  # its embedding reused
    rewrite(source / "c.parquet", edit)
    v2 = raycache.fill(cfg)
    assert "encoder task" in v2.pool  # on Ray
    assert (v2.encoded_rows, v2.reused_rows, v2.shared_rows) == (10, 1, 589)
    assert_same_rows(v2.cache, whole(cfg))


@pytest.mark.s3
def test_versions_share_storage_on_s3(bucket, source, tmp_path):
    """On an S3 store (a moto server): a version refers to the older one's objects by their
    store-relative folder, reads, verifies and survives gc --retain 1."""
    store = f"{bucket}/caches"
    cfg = {**config(source, tmp_path), "store": {"uri": store}}
    raycache.fill(cfg)
    rewrite(source / "a.parquet", lambda d: d["label"].__setitem__(3, (d["label"][3] + 1) % 3))
    v2 = raycache.fill(cfg)
    assert (v2.encoded_rows, v2.reused_rows, v2.shared_rows) == (0, 1, 599)
    assert raycache.verify(v2.cache).ok
    removed = raycache.gc(store, retain=1, delete=True, grace=None)
    assert len(removed.removed) == 1
    after = raycache.open_cache("toy", store)
    assert after.fingerprint == v2.cache.fingerprint and raycache.verify(after).ok
    assert_same_rows(after, whole({**cfg, "store": {"uri": str(tmp_path / "local")}}))

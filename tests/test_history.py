"""A version's place in its name's history is fixed at its first commit: a repair or a
compaction of an older version re-commits it without making it the newest, for open_cache by
name, ls, training by name and gc's policies; manifests written before places were keep
today's order (by `created`)."""

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raycache
from raycache._cache.order import HISTORY, Place, history
from raycache._cli import main
from raycache._fill.commit import next_place
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def chain(tmp_path) -> tuple[Path, list[raycache.Cache], dict]:
    """Three versions from explicit file lists, each older one's source untouched after it:
    v1 reads a, b, c, e; v2 reads a, b and c2 (c with 30 of each 50 rows' inputs edited: c's
    shards shared with a selection, too sparse for compaction off) and no e; v3 adds d."""
    src = tmp_path / "source"
    src.mkdir()
    table = separable(n=800)
    for i, name in enumerate("abce"):
        pq.write_table(table.slice(200 * i, 200), src / f"{name}.parquet", row_group_size=50)
    c2 = pq.read_table(src / "c.parquet").to_pydict()
    c2["features"] = [[x + 1.0 for x in f] if i % 50 < 30 else f
                      for i, f in enumerate(c2["features"])]
    pq.write_table(pa.table(c2, schema=table.schema), src / "c2.parquet", row_group_size=50)
    d = separable(n=60, seed=5).to_pydict()
    d["id"] = [f"new-{i}" for i in range(60)]
    pq.write_table(pa.table(d, schema=table.schema), src / "d.parquet")

    def cfg(*names: str) -> dict:
        return toy_fill([str(src / f"{n}.parquet") for n in names], str(tmp_path / "store"),
                        rows_per_shard=50, in_process=True, compact_below=0)
    v1 = raycache.fill(cfg("a", "b", "c", "e")).cache
    v2 = raycache.fill(cfg("a", "b", "c2")).cache
    v3 = raycache.fill(cfg("a", "b", "c2", "d")).cache
    assert any(s.keep for s in v2.manifest.shards) and v3.manifest.rows == 660
    return tmp_path / "store", [v1, v2, v3], cfg("a", "b", "c2", "d")


def fps(caches: list[raycache.Cache]) -> list[str]:
    return [c.fingerprint for c in caches]


def test_each_first_commit_takes_the_next_sequence_number(chain):
    _, versions, _ = chain
    assert [v.manifest.place.sequence for v in versions] == [1, 2, 3]
    assert all(HISTORY in v.manifest.extra for v in versions)


def test_compact_and_repair_of_older_versions_leave_the_newest_newest(chain, capsys):
    store, (v1, v2, v3), _ = chain
    newest_rows = v3.read_table().sort_by("id")
    compacted = raycache.compact("toy", str(store), v2.fingerprint, below=0.9, progress=False)
    assert not compacted.hit and compacted.cache.fingerprint == v2.fingerprint
    assert compacted.cache.manifest.created > v3.manifest.created  # re-committed after v3
    only_v1 = [s for s in v1.manifest.shards if s.source.endswith("e.parquet")]
    assert only_v1
    os.remove(Path(v1.dir) / only_v1[0].path)  # a shard only v1 reads
    repaired = raycache.repair("toy", str(store), v1.fingerprint, progress=False)
    assert repaired.encoded_rows > 0 and repaired.cache.fingerprint == v1.fingerprint
    assert repaired.cache.manifest.place == v1.manifest.place  # kept, not renumbered

    assert raycache.open_cache("toy", str(store)).fingerprint == v3.fingerprint
    assert fps(raycache.ls(str(store), "toy")) == fps([v1, v2, v3])
    from raycache._cache.store import Store
    from raycache._train.driver.checks import check, load_config

    cfg = load_config({"cache": "toy", "store": {"uri": str(store)}, "label": "label"})
    assert check(cfg, Store(str(store)))[0].fingerprint == v3.fingerprint  # training by name
    assert main(["runs", "toy", "--store", str(store)]) == 0
    assert v3.fingerprint[:12] in capsys.readouterr().out

    assert main(["gc", "--store", str(store), "--retain", "1", "--delete"]) == 0
    assert fps(raycache.ls(str(store))) == [v3.fingerprint]
    after = raycache.open_cache("toy", str(store))
    assert after.read_table().sort_by("id").equals(newest_rows)
    assert raycache.verify(after).ok


def test_gc_older_than_counts_from_the_first_commit(chain):
    store, (v1, v2, v3), _ = chain
    raycache.compact("toy", str(store), v2.fingerprint, below=0.9, progress=False)
    first = raycache.open_cache("toy", str(store), v2.fingerprint).manifest.place.first
    assert first == v2.manifest.place.first
    picked = raycache.gc(str(store), older_than=1, now=v3.manifest.place.first + 2)
    assert {r.usage.fingerprint for r in picked.removed} == {v1.fingerprint, v2.fingerprint}


def test_manifests_without_a_place_keep_their_created_order_and_come_first():
    legacy = [Place(0, 200.0, "b"), Place(0, 100.0, "a")]
    newer = Place(next_place(None, legacy, "")["sequence"], 50.0, "c")  # an early clock
    assert newer.sequence == 1
    items = [("x", p) for p in (newer, *legacy)] + [("y", Place(0, 150.0, "z"))]
    ordered = history(items, lambda i: i[0], lambda i: i[1])
    # x holds the 1st, 2nd and 4th places by time, in its history; y the 3rd
    assert [p.fingerprint for _, p in ordered] == ["a", "b", "z", "c"]


def test_a_re_commit_of_a_manifest_without_a_place_keeps_its_created(chain):
    store, (v1, *_), _ = chain
    m = v1.manifest
    m.extra.pop(HISTORY)
    m.created = "2020-01-01T00:00:00.000+00:00"
    rec = next_place(m, [Place(5, 0.0, "x")], "2030-01-01T00:00:00+00:00")
    assert rec == {"sequence": 0, "first_committed": "2020-01-01T00:00:00.000+00:00"}
    assert np.isclose(m.place.first, 1577836800.0)

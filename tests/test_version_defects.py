"""Versions in awkward states: one whose only change is a source file removed or emptied fills
as the same rows filled whole, sharing the rest; a damaged newest shard list is passed by; a
row selection (`keep`) that does not decode or fit, or brings back a row its version left out,
is a CorruptCache naming the entry on every read, BAD in verify, and repair rebuilds the
version (no Ray)."""

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raycache
from raycache._cache.selection import encode
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def source(tmp_path) -> Path:
    folder = tmp_path / "source"
    folder.mkdir()
    table = separable(n=600)
    for i, name in enumerate("abc"):
        pq.write_table(table.slice(200 * i, 200), folder / f"{name}.parquet", row_group_size=50)
    return folder


def by_key(cache: raycache.Cache):
    return cache.read_table(["id", "label", "name", "proj"]).sort_by("id")


@pytest.mark.parametrize("change", ["removed", "emptied"])
def test_a_version_whose_only_change_is_a_removed_or_emptied_file(source, tmp_path, change):
    cfg = toy_fill(str(source), str(tmp_path / "store"), rows_per_shard=50, in_process=True)
    v1 = raycache.fill(cfg)
    if change == "removed":
        os.remove(source / "c.parquet")
    else:
        pq.write_table(pq.read_table(source / "c.parquet").slice(0, 0), source / "c.parquet")
    v2 = raycache.fill(cfg)
    assert v2.base == v1.cache.fingerprint and v2.shared_rows == 400 and v2.encoded_rows == 0
    assert v2.cache.manifest.rows == 400 and raycache.verify(v2.cache).ok
    whole = raycache.fill({**cfg, "name": "whole", "share": False, "reuse": False}).cache
    assert by_key(v2.cache).equals(by_key(whole))
    assert v2.cache.manifest.label_stats == whole.manifest.label_stats


def test_a_damaged_shard_list_on_the_newest_version_is_passed_by(source, tmp_path):
    cfg = toy_fill(str(source), str(tmp_path / "store"), rows_per_shard=50, in_process=True)
    v1 = raycache.fill(cfg).cache
    listing = Path(v1.dir) / v1.manifest.shard_list["path"]
    listing.write_text(listing.read_text()[:100])  # truncated
    os.remove(source / "c.parquet")
    with pytest.warns(raycache.DamagedCacheWarning, match="passes it by"):
        v2 = raycache.fill(cfg)  # shares nothing of it, as the message says
    assert v2.base == "" and v2.cache.manifest.rows == 400 and raycache.verify(v2.cache).ok
    assert not list((tmp_path / "store").rglob("_leases/*"))
    whole = raycache.fill({**cfg, "name": "whole", "share": False, "reuse": False}).cache
    assert by_key(v2.cache).equals(by_key(whole))


def set_keep(cache: raycache.Cache, keep: str) -> None:
    """The first shared-in-part entry's `keep` replaced, the shard list's checksum fixed (as
    an edit by hand would)."""
    def edit(entries: list[dict]) -> None:
        next(e for e in entries if e.get("keep"))["keep"] = keep

    edit_entries(Path(cache.dir), edit)


def edit_entries(folder: Path, edit: Callable[[list[dict]], None]) -> None:
    """The shard list of the cache folder `folder` edited in place by `edit` (given its
    entries), its checksum fixed in the manifest, as an edit by hand would."""
    manifest = json.loads((folder / "manifest.json").read_text())
    entries = json.loads((folder / manifest["shard_list"]["path"]).read_text())
    edit(entries)
    listing = (json.dumps(entries, sort_keys=True, separators=(",", ":")) + "\n").encode()
    sha = hashlib.sha256(listing).hexdigest()
    (folder / manifest["shard_list"]["path"]).unlink()
    (folder / f"shards-{sha[:16]}.json").write_bytes(listing)
    manifest["shard_list"] = {"path": f"shards-{sha[:16]}.json", "bytes": len(listing),
                              "sha256": sha}
    (folder / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("keep", ["not base64!!", encode(np.ones(20, bool)),
                                  encode(np.ones(56, bool))], ids=["garbage", "short", "past"])
def test_a_keep_that_does_not_decode_or_fit_is_named_and_repaired(source, tmp_path, keep):
    store = str(tmp_path / "store")
    cfg = toy_fill(str(source), store, rows_per_shard=50, in_process=True, compact_below=0)
    raycache.fill(cfg)
    data = pq.read_table(source / "a.parquet").to_pydict()
    for i in range(0, 200, 10):
        data["features"][i] = [x + 1.0 for x in data["features"][i]]
    pq.write_table(pa.table(data, schema=pq.read_schema(source / "b.parquet")),
                   source / "a.parquet", row_group_size=50)
    v2 = raycache.fill(cfg).cache
    set_keep(v2, keep)
    cache = raycache.open_cache("toy", store)
    for verify in (True, False):
        with pytest.raises(raycache.CorruptCache, match="row selection .*raycache repair toy"):
            cache.read_table(verify=verify)
    report = raycache.verify(cache)
    assert not report.ok and any("row selection" in " ".join(r) for r in report.bad.values())
    fixed = raycache.repair("toy", store, progress=False)
    assert fixed.repair and fixed.cache.fingerprint == v2.fingerprint
    again = raycache.open_cache("toy", store)
    assert raycache.verify(again).ok
    whole = raycache.fill({**cfg, "name": "whole", "share": False, "reuse": False}).cache
    assert by_key(again).equals(by_key(whole))


def test_an_integer_label_with_nulls_is_counted_and_its_version_shares(source, tmp_path):
    for name in "abc":  # a null label in every file
        data = pq.read_table(source / f"{name}.parquet").to_pydict()
        data["label"][7] = None
        pq.write_table(pa.table(data, schema=pq.read_schema(source / "b.parquet")),
                       source / f"{name}.parquet", row_group_size=50)
    cfg = toy_fill(str(source), str(tmp_path / "store"), rows_per_shard=50, in_process=True)
    v1 = raycache.fill(cfg)
    stats = v1.cache.manifest.label_stats["label"]
    assert stats["nulls"] == 3 and sum(stats["counts"]) == 597
    os.remove(source / "c.parquet")
    v2 = raycache.fill(cfg)
    assert v2.base == v1.cache.fingerprint and v2.shared_rows == 400
    whole = raycache.fill({**cfg, "name": "whole", "share": False, "reuse": False}).cache
    assert by_key(v2.cache).equals(by_key(whole))
    assert v2.cache.manifest.label_stats == whole.manifest.label_stats


def test_a_consistent_but_wrong_keep_is_bad_in_verify_and_repaired(source, tmp_path):
    """A selection with the right number of rows that brings back a removed row (and leaves
    out a kept one): no key twice, every count right, but two shards' rows at one place."""
    store = str(tmp_path / "store")
    cfg = toy_fill(str(source), store, rows_per_shard=50, in_process=True, compact_below=0)
    raycache.fill(cfg)
    table = pq.read_table(source / "a.parquet")
    keep = np.ones(200, bool)
    keep[[3, 60]] = False  # two rows removed from the source
    pq.write_table(table.filter(pa.array(keep)), source / "a.parquet", row_group_size=50)
    v2 = raycache.fill(cfg).cache
    entry = next(e for e in v2.manifest.shards if e.keep and e.ranges[0].start == 0)
    wrong = np.ones(entry.file_rows, bool)
    wrong[10] = False  # row 3 back, row 10 gone: 49 rows, as recorded
    set_keep(v2, encode(wrong))
    cache = raycache.open_cache("toy", store)
    with pytest.raises(raycache.CorruptCache, match="entry .*keeps rows its version left out"):
        cache.read_table()  # never its rows, wrongly
    report = raycache.verify(cache)
    assert not report.ok and not report.duplicate_keys.count
    assert any("keeps rows its version left out" in " ".join(r) for r in report.bad.values())
    raycache.repair("toy", store, progress=False)
    again = raycache.open_cache("toy", store)
    assert raycache.verify(again).ok
    whole = raycache.fill({**cfg, "name": "whole", "share": False, "reuse": False}).cache
    assert by_key(again).equals(by_key(whole))

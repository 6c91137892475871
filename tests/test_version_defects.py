"""Versions whose only change is awkward: a source file removed, or emptied, fills as the same
rows filled whole, sharing the rest (no Ray)."""

import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import raycache
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

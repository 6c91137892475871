"""Races and crashes inside a fill: a source file replaced while the fill runs fails it with
nothing committed, and a crash between a shard's rewrite (duplicate keys dropped) and its
record never leaves a manifest that disagrees with its shards. Each ends with a fill that
commits what the source holds, checked by verify."""

import importlib
import json
import os
from pathlib import Path
from unittest import mock

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raycache
from raycache import SourceError
from raycache._fill.plan import load_config, plan
from raycache._upkeep.verify import verify
from tests.conftest import ROOT, TESTS, separable, toy_fill
from tests.faults import Driver

pytestmark = pytest.mark.timeout(300)


def replace_file(path: Path, seed: int) -> pa.Table:
    """Write other rows (the same keys, other features) over `path`; the rows written."""
    table = pq.read_table(path)
    other = separable(n=table.num_rows, seed=seed).set_column(0, "id", table.column("id"))
    pq.write_table(other, path)
    return other


def features_of(cache) -> dict[str, list[float]]:
    """Each key's embedding in a committed cache."""
    table = cache.read_table()
    return dict(zip(table.column("id").to_pylist(), table.column("proj").to_pylist(),
                    strict=True))


def test_a_file_replaced_after_it_was_read_fails_the_commit(separable_source, tmp_path):
    cfg = toy_fill(str(separable_source), str(tmp_path / "store"), in_process=True)
    before = plan(load_config(cfg)).fingerprint
    run = importlib.import_module("raycache._fill.run")
    original = run.check_complete

    def then_replaced(*args, **kwargs):  # every row read and encoded, then a.parquet replaced
        replace_file(separable_source / "a.parquet", seed=1)
        return original(*args, **kwargs)

    with mock.patch.object(run, "check_complete", then_replaced), \
            pytest.raises(SourceError) as err:
        raycache.fill(cfg)
    message = str(err.value)
    assert "a.parquet" in message and "b.parquet" not in message
    assert "nothing was committed" in message and "Run it again" in message
    assert raycache.ls(str(tmp_path / "store")) == []

    again = raycache.fill(cfg)  # a cache of the new contents, nothing taken from the old run
    assert again.cache.fingerprint != before and again.resumed_rows == 0
    assert again.encoded_rows == 600 and verify(again.cache).ok
    fresh = raycache.fill({**cfg, "store": {"uri": str(tmp_path / "fresh")}}).cache
    assert features_of(again.cache) == features_of(fresh)


def test_a_file_replaced_before_it_was_read_stops_the_fill(separable_source, tmp_path):
    cfg = toy_fill(str(separable_source), str(tmp_path / "store"), in_process=True,
                   rows_per_shard=50)
    shards = importlib.import_module("raycache._fill.shards")
    original = shards._write
    calls = []

    def then_replaced(*args, **kwargs):  # a.parquet's first shard written, then b replaced
        calls.append(1)
        if len(calls) == 1:
            replace_file(separable_source / "b.parquet", seed=2)
        return original(*args, **kwargs)

    with mock.patch.object(shards, "_write", then_replaced), pytest.raises(SourceError) as err:
        raycache.fill(cfg)
    assert "b.parquet" in str(err.value) and "the run stopped" in str(err.value)
    assert raycache.ls(str(tmp_path / "store")) == []
    again = raycache.fill(cfg)
    assert again.resumed_rows == 0 and verify(again.cache).ok


@pytest.mark.ray
def test_a_file_replaced_before_a_ray_read_task_reads_it_stops_the_fill(ray_session,
                                                                       separable_source,
                                                                       tmp_path):
    """On Ray the read tasks check each file against its listed version: replaced after the
    plan, before the stages start, it fails the fill with the SourceError the task raised."""
    cfg = toy_fill(str(separable_source), str(tmp_path / "store"), in_process=False)
    run = importlib.import_module("raycache._fill.run")
    original = run.resumable

    def then_replaced(p):
        replace_file(separable_source / "b.parquet", seed=3)
        return original(p)

    with mock.patch.object(run, "resumable", then_replaced), pytest.raises(SourceError) as err:
        raycache.fill(cfg)
    assert "b.parquet" in str(err.value) and "the run stopped" in str(err.value)
    assert raycache.ls(str(tmp_path / "store")) == []


def test_a_file_removed_before_it_was_read_stops_the_fill(separable_source, tmp_path):
    cfg = toy_fill(str(separable_source), str(tmp_path / "store"), in_process=True,
                   rows_per_shard=50)
    shards = importlib.import_module("raycache._fill.shards")
    original = shards._write

    def then_removed(*args, **kwargs):
        (separable_source / "b.parquet").unlink(missing_ok=True)
        return original(*args, **kwargs)

    with mock.patch.object(shards, "_write", then_removed), pytest.raises(SourceError) as err:
        raycache.fill(cfg)
    assert "b.parquet' was removed" in str(err.value)
    assert raycache.ls(str(tmp_path / "store")) == []


def duplicated(tmp_path: Path) -> str:
    """300 rows, row-00005's key three times (rows 5, 10 and 250: two 150-row shards)."""
    table = separable(n=300)
    ids = table.column("id").to_pylist()
    ids[10], ids[250] = ids[5], ids[5]
    (tmp_path / "dup").mkdir()
    pq.write_table(table.set_column(0, "id", pa.array(ids)), tmp_path / "dup" / "a.parquet")
    return str(tmp_path / "dup")


CRASH = """
import json, os, signal
import raycache
from raycache._cache.store import Store

original = Store.write_json

def write_json(self, path, obj, exclusive=False, **kwargs):
    rewritten = "/_progress/" in path and obj["rows"] < sum(r[2] - r[1] for r in obj["ranges"])
    if rewritten:
        os.kill(os.getpid(), signal.SIGKILL)  # kill -9, between the rewrite and its record
    return original(self, path, obj, exclusive, **kwargs)

Store.write_json = write_json
raycache.fill(json.loads({cfg!r}))
"""


def test_a_crash_between_a_dedup_rewrite_and_its_record_leaves_them_agreeing(tmp_path):
    """Killed between a shard's rewrite and its record: the re-run commits a manifest whose
    every entry matches its shard's bytes, and leaves no stray shard."""
    cfg = toy_fill(duplicated(tmp_path), str(tmp_path / "store"), rows_per_shard=150,
                   in_process=True, reuse=False)
    cfg["source"]["duplicates"] = "first"
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)]), "RAY_ADDRESS": ""}
    driver = Driver(CRASH.format(cfg=json.dumps(cfg)), env=env,
                    log=tmp_path / "driver.log")
    assert driver.wait(timeout=240) == -9, (tmp_path / "driver.log").read_text()[-3000:]
    assert not list((tmp_path / "store").rglob("manifest.json"))

    result = raycache.fill(cfg)
    report = verify(result.cache)
    assert report.ok and not report.stray, report
    m = result.cache.manifest
    assert m.rows == 298 and result.cache.read_table().num_rows == 298
    for entry in m.shards:
        assert pq.read_metadata(Path(result.cache.dir) / entry.path).num_rows == entry.rows


def test_resume_distrusts_a_record_whose_shard_has_other_bytes(separable_source, tmp_path):
    """A record that describes other bytes than its shard's (an older raycache rewrote shards
    in place before their records) is not kept: its rows are encoded again."""
    cfg = toy_fill(str(separable_source), str(tmp_path / "store"), rows_per_shard=50,
                   in_process=True, reuse=False)
    with mock.patch.object(importlib.import_module("raycache._fill.run"), "check_complete",
                           side_effect=RuntimeError("stopped before the commit")), \
            pytest.raises(RuntimeError):
        raycache.fill(cfg)
    [first, *rest] = sorted((tmp_path / "store").rglob("shards/*.parquet"))
    table = pq.read_table(first)
    pq.write_table(table.slice(1), first)  # one row fewer than its record says

    result = raycache.fill(cfg)
    assert result.resumed_rows == 600 - 50 and result.encoded_rows == 50
    assert verify(result.cache).ok and result.cache.read_table().num_rows == 600


@pytest.mark.s3
def test_an_s3_object_replaced_with_one_of_the_same_size_fails_the_commit(bucket, tmp_path):
    """On S3 the ETag tells a replaced object from the one listed, even at the same size."""
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    rows = separable(n=40).to_pylist()
    text = "".join(json.dumps(r) + "\n" for r in rows)
    fs.pipe(f"{bucket}/data/a.jsonl", text.encode())
    cfg = toy_fill(f"{bucket}/data/", str(tmp_path / "store"), in_process=True)
    run = importlib.import_module("raycache._fill.run")
    original = run.check_complete
    other = text.replace('"label": 0', '"label": 1')
    assert len(other) == len(text) and other != text

    def then_replaced(*args, **kwargs):
        fs.pipe(f"{bucket}/data/a.jsonl", other.encode())
        return original(*args, **kwargs)

    with mock.patch.object(run, "check_complete", then_replaced), \
            pytest.raises(SourceError, match=r"a\.jsonl' changed version \(modification time "
                                             r"or ETag"):
        raycache.fill(cfg)
    assert raycache.ls(str(tmp_path / "store")) == []
    again = raycache.fill(cfg).cache
    assert set(again.read_table().column("label").to_pylist()) == {1, 2}


def test_a_fill_whose_shards_another_fill_deduplicated_and_committed_returns_that_cache(
        tmp_path):
    """Two fills of one cache with duplicate keys: the one that commits first replaces the
    shards both wrote with rewritten ones; the other, at its key scan, finds its shards gone
    and returns the committed cache (as when it loses the commit), not a FileNotFoundError."""
    cfg = toy_fill(duplicated(tmp_path), str(tmp_path / "store"), rows_per_shard=150,
                   in_process=True, reuse=False)
    cfg["source"]["duplicates"] = "last"
    shared = importlib.import_module("raycache._fill.shared")  # where the key scan step calls it
    original = shared.scan_keys
    first = []

    def other_fill_commits_first(*args, **kwargs):
        if not first:
            first.append(None)
            first[0] = raycache.fill(cfg)  # resumes this fill's shards, rewrites, commits
        return original(*args, **kwargs)

    with mock.patch.object(shared, "scan_keys", other_fill_commits_first):
        second = raycache.fill(cfg)
    assert second.hit and not first[0].hit
    assert second.cache.manifest.shards == first[0].cache.manifest.shards
    assert verify(second.cache).ok and second.cache.read_table().num_rows == 298

"""A store's life: du counts every byte of every cache folder; gc lists by default, removes with
delete, and never takes a cache a live run reads (or, within the grace, a run that can resume),
nor a name's newest fill (no Ray)."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import raycache
from raycache import ConfigError
from raycache._cli import main
from raycache._core.units import parse_duration, parse_size
from raycache._train.folder.checkpoints import PREFIX, STATE
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(120)

DAY = 86400.0
AGES = (3, 2, 1)
"""Days since each committed fill of "toy" was created, oldest first."""


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> Path:
    """Three committed fingerprints of "toy", created 3, 2 and 1 days ago (fill once)."""
    root = tmp_path_factory.mktemp("filled")
    (root / "source").mkdir()
    pq.write_table(separable(n=60), root / "source" / "a.parquet")
    for days, out_dim in zip(AGES, (16, 8, 4), strict=True):
        enc = {"name": "proj", "kind": "torch", "input": "features",
               "factory": "toy_encoders:projection", "kwargs": {"in_dim": 8, "out_dim": out_dim}}
        result = raycache.fill(toy_fill(str(root / "source"), str(root / "store"),
                                        rows_per_shard=30, in_process=True, encoders=[enc]))
        path = Path(result.cache.dir) / "manifest.json"
        manifest = json.loads(path.read_text())
        manifest["created"] = datetime.fromtimestamp(time.time() - days * DAY, UTC).isoformat(
            timespec="seconds")  # and first committed then: its place's date (its order stays)
        manifest["extra"]["history"]["first_committed"] = manifest["created"]
        path.write_text(json.dumps(manifest))
    return root / "store"


@pytest.fixture
def store(filled, tmp_path) -> Path:
    """A copy of the filled store, plus an unfinished fill written 2 days ago and one an hour
    ago, and a live run on the oldest committed fill."""
    store = tmp_path / "store"
    shutil.copytree(filled, store)
    for fp, age in (("stale0000000", 2 * DAY), ("fresh0000000", 3600.0)):
        folder = store / "toy" / fp
        (folder / "_progress").mkdir(parents=True)
        (folder / "shards").mkdir()
        (folder / "shards" / "part-x.parquet").write_bytes(b"x" * 1000)
        (folder / "_progress" / "part-x.parquet.json").write_text("{}")
        for f in folder.rglob("*"):
            os.utime(f, (time.time() - age, time.time() - age))
    run = Path(oldest(store).dir) / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"status": "running", "host": socket.gethostname(),
                                              "pid": os.getpid(), "updated": "now"}))
    return store


def oldest(store: Path) -> raycache.Cache:
    return raycache.ls(str(store), "toy")[0]


def files(store: Path) -> dict[str, int]:
    return {str(p): p.stat().st_size for p in store.rglob("*") if p.is_file()}


def committed_ids(store: Path) -> list[str]:
    return [f"toy/{c.fingerprint}" for c in raycache.ls(str(store), "toy")]


def test_du_totals_equal_the_bytes_on_disk(store, capsys):
    found = raycache.du(str(store))
    assert sum(u.bytes for u in found) == sum(files(store).values())
    assert [u.committed for u in found].count(False) == 2
    for u in found:
        assert u.bytes == sum(files(Path(u.dir)).values())
        assert u.rows == (60 if u.committed else None) and u.shards == (2 if u.committed else 1)
    [live] = [u for u in found if u.live_runs]
    assert live.live_runs == ("r1",) and live.id == committed_ids(store)[0]
    assert live.runs_bytes == (Path(live.dir) / "runs" / "r1" / "run.json").stat().st_size
    assert main(["du", "--store", str(store)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 6 and f"({sum(files(store).values())} bytes) in 5 cache folder" in out[-1]


def test_gc_dry_run_deletes_nothing_and_lists_the_bytes(store, capsys):
    before = files(store)
    result = raycache.gc(str(store), retain=1)
    assert files(store) == before and not result.deleted
    ids = committed_ids(store)
    assert sorted(r.usage.id for r in result.removed) == sorted(["toy/stale0000000", ids[1]])
    assert result.bytes == sum(r.usage.bytes for r in result.removed) > 0
    assert [r.usage.id for r in result.kept] == [ids[0]] and "r1" in result.kept[0].reason

    assert main(["gc", "--store", str(store), "--retain", "1"]) == 0
    out = capsys.readouterr().out
    assert files(store) == before
    assert f"would remove {ids[1]}" in out and f"keep {ids[0]}" in out
    assert f"({result.bytes} bytes); pass --delete" in out


def test_gc_keep_last_the_old_name_of_retain_still_works_with_a_warning_naming_it(
        store, capsys):
    before = files(store)
    picked = sorted(r.usage.id for r in raycache.gc(str(store), retain=1).removed)
    with pytest.warns(DeprecationWarning, match=r"raycache.gc\(\): keep_last= is the old name "
                                                r"of retain= \(renamed in raycache 0.2; the old "
                                                r"name goes in 0.3\): write retain="):
        old = raycache.gc(str(store), keep_last=1)
    assert sorted(r.usage.id for r in old.removed) == picked and len(picked) == 2
    with pytest.raises(TypeError, match="got retain= and keep_last=, its old name"):
        raycache.gc(str(store), retain=1, keep_last=1)
    assert main(["gc", "--store", str(store), "--keep-last", "1"]) == 0
    said = capsys.readouterr()
    assert "raycache gc: warning: --keep-last is the old name of --retain" in said.err
    assert all(f"would remove {i}" in said.out for i in picked) and files(store) == before
    assert main(["gc", "--store", str(store), "--retain", "1"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_gc_delete_removes_old_unfinished_and_old_fingerprints_but_not_a_live_runs(store):
    ids = committed_ids(store)
    result = raycache.gc(str(store), retain=1, delete=True)
    assert result.deleted and not (store / "toy" / "stale0000000").exists()
    assert (store / "toy" / "fresh0000000").exists()  # within the 24h grace: a fill under way
    assert committed_ids(store) == [ids[0], ids[2]]  # the live run's cache and the newest

    run_json = Path(oldest(store).dir) / "runs" / "r1" / "run.json"
    run_json.write_text(json.dumps({**json.loads(run_json.read_text()), "status": "finished"}))
    assert main(["gc", "--store", str(store), "--retain", "0", "--grace", "1m",
                 "--delete"]) == 0
    assert committed_ids(store) == [ids[2]]  # the newest stays unless asked for
    assert not (store / "toy" / "fresh0000000").exists()  # past a 1-minute grace
    raycache.gc(str(store), retain=0, include_newest=True, delete=True)
    assert committed_ids(store) == [] and not (store / "toy" / ids[2].split("/")[1]).exists()


def test_gc_older_than_and_max_size_pick_the_oldest(store):
    ids = committed_ids(store)
    older = raycache.gc(str(store), older_than="36h", grace="30d")
    assert [r.usage.id for r in older.removed] == [ids[1]]  # ids[0]: live run; ids[2]: 1 day
    found = raycache.du(str(store))
    sizes = {u.id: u.bytes for u in found}
    total = sum(sizes.values())
    fits = raycache.gc(str(store), max_size=total - 1, grace="30d")
    assert [r.usage.id for r in fits.removed] == [ids[1]]  # the oldest that may go
    everything = raycache.gc(str(store), max_size=0, grace="30d", include_newest=True)
    assert {r.usage.id for r in everything.removed} == {ids[1], ids[2]}
    assert [r.usage.id for r in everything.kept] == [ids[0]]


def test_gc_keeps_a_cache_a_died_run_can_resume_from_within_the_grace(store, capsys):
    """A run whose driver died after a checkpoint can resume: its cache is kept while the
    run's record is younger than the grace period, and may go once it is older."""
    ids = committed_ids(store)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    run = Path(oldest(store).dir) / "runs" / "r1"
    (run / "run.json").write_text(json.dumps({"status": "running", "pid": dead.pid,
                                              "host": socket.gethostname(), "updated": "x"}))
    (run / f"{PREFIX}000002").mkdir()
    (run / f"{PREFIX}000002" / STATE).write_bytes(b"state")
    [u] = [u for u in raycache.du(str(store)) if u.id == ids[0]]
    assert u.live_runs == () and [name for name, _ in u.resumable_runs] == ["r1"]
    assert "resumable runs: r1" in u.line()

    result = raycache.gc(str(store), retain=1)
    [kept] = [r for r in result.kept if r.usage.id == ids[0]]
    assert "can resume: r1 (last written" in kept.reason
    assert ids[0] not in {r.usage.id for r in result.removed}

    hours_ago = time.time() - 30 * 3600
    os.utime(run / "run.json", (hours_ago, hours_ago))
    assert ids[0] in {r.usage.id for r in raycache.gc(str(store), retain=1).removed}
    assert ids[0] in {r.usage.id for r in raycache.gc(str(store), retain=1, grace="2d").kept}


def test_verify_lists_stray_files_and_gc_removes_those_past_the_grace(store, capsys):
    """Files in a committed cache's folder that its manifest does not name (a shard an
    abandoned fill wrote, a progress record, an old shard list) are listed by verify, which
    still passes, and removed by gc once older than the grace; the cache reads as before."""
    newest = raycache.ls(str(store), "toy")[-1]
    folder = Path(newest.dir)
    old = {"shards/part-abandoned.parquet": 700, "_progress/part-abandoned.parquet.json": 20,
           "shards-0123456789abcdef.json": 30}
    for rel, size in {**old, "shards/part-fresh.parquet": 500}.items():
        (folder / rel).parent.mkdir(exist_ok=True)
        (folder / rel).write_bytes(b"x" * size)
        age = 2 * DAY if rel in old else 3600.0
        os.utime(folder / rel, (time.time() - age, time.time() - age))
    before = newest.to_pandas()

    report = raycache.verify(newest)
    assert report.ok and report.stray == {**old, "shards/part-fresh.parquet": 500}
    assert main(["verify", f"toy/{newest.fingerprint}", "--store", str(store)]) == 0
    assert "STRAY: 4 file(s)" in capsys.readouterr().out

    dry = raycache.gc(str(store))
    assert {(s.usage.id, s.path, s.bytes) for s in dry.strays} == {
        (f"toy/{newest.fingerprint}", rel, size) for rel, size in old.items()}
    assert "and 3 stray file(s)" in dry.lines()[-1] and (folder / "shards-0123456789abcdef.json"
                                                         ).exists()
    raycache.gc(str(store), delete=True)
    assert raycache.verify(newest).stray == {"shards/part-fresh.parquet": 500}
    assert raycache.gc(str(store), grace=None).strays == []  # no grace: strays stay
    reread = raycache.ls(str(store), "toy")[-1]
    assert raycache.verify(reread).ok and reread.to_pandas().equals(before)


def test_sizes_and_durations_parse_and_bad_values_are_named(store, capsys):
    assert parse_size("50GB") == 50 * 10**9 and parse_size("1.5GiB") == 3 * 2**29
    assert parse_size("200 mb") == 2 * 10**8 and parse_size(1024) == 1024
    assert parse_duration("7d") == 7 * DAY and parse_duration("30m") == 1800
    assert parse_duration("24h") == DAY
    for bad, call in (("50XB", lambda: parse_size("50XB", "max_size")),
                      ("7", lambda: parse_duration("7", "older_than")),
                      ("-1h", lambda: parse_duration("-1h", "grace"))):
        with pytest.raises(ConfigError, match=f"={bad!r}: expected a number and a unit"):
            call()
    assert main(["gc", "--store", str(store), "--max-size", "50XB", "--older-than", "soon"]) == 3
    err = capsys.readouterr().err
    assert "--max-size='50XB'" in err and "--older-than='soon'" in err and "GiB" in err

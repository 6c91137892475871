"""Upkeep of versions that share storage (format 5): verify, strays, gc, du and repair over
three versions of one cache built by hand (no Ray, no fill): v1 writes shards A, B and C; v2
shares A whole and B less two rows, and writes D; v3 shares A and B (less four rows) of v1 and
D of v2, and writes E."""

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raycache
from raycache import DamagedCacheWarning
from raycache._cache.finding import open_cache
from raycache._cache.selection import encode
from raycache._cache.vectors import pack
from raycache._cli import main
from raycache._upkeep.strays import read_by_others, strays
from raycache._upkeep.verify import verify

NAME, DIM, BLOCK = "ver", 4, "b" * 16
FP = {1: "1" * 24, 2: "2" * 24, 3: "3" * 24}
SHARDS = {"A": range(0, 10), "B": range(10, 20), "C": range(20, 30), "D": range(30, 35),
          "E": range(40, 45), "F": range(50, 53)}
"""Each shard file's source rows; row i has key f"k{i}"."""
B_IN_V2 = [i not in (12, 15) for i in SHARDS["B"]]
B_IN_V3 = [i >= 14 for i in SHARDS["B"]]


def vid(version: int) -> str:
    return f"{NAME}/{FP[version]}"


def write_shard(folder: Path, letter: str) -> dict:
    """Shard `letter` in `folder` (packed embeddings); its entry without home or keep."""
    rows = SHARDS[letter]
    ids = np.arange(rows.start, rows.stop)
    emb = np.stack([np.full(DIM, i, np.float32) for i in ids])
    table = pack(pa.table({
        "id": [f"k{i}" for i in ids], "label": pa.array(ids % 3, pa.int64()),
        "proj": pa.FixedSizeListArray.from_arrays(pa.array(emb.reshape(-1)), DIM)}), ["proj"])
    path = f"shards/part-{BLOCK}-{rows.start:010d}.parquet"
    (folder / "shards").mkdir(parents=True, exist_ok=True)
    pq.write_table(table, folder / path)
    blob = (folder / path).read_bytes()
    return {"path": path, "rows": len(rows), "bytes": len(blob),
            "sha256": hashlib.sha256(blob).hexdigest(), "source": "/data/a.parquet",
            "ranges": [[BLOCK, rows.start, rows.stop]]}


def shared(entry: dict, home: int, keep: list[bool] | None = None) -> dict:
    """An older version's entry as a newer one that shares its file names it."""
    out = {**entry, "home": vid(home)}
    if keep is not None:
        start = entry["ranges"][0][1]
        kept = [start + i for i, k in enumerate(keep) if k]
        runs = [[BLOCK, a, a + 1] for a in kept]  # one range per kept row: simple, exact
        out.update(keep=encode(np.array(keep)), stored=entry["rows"], rows=len(kept),
                   ranges=runs)
    return out


def commit(store: Path, version: int, entries: list[dict], month: int) -> None:
    """A format 5 manifest and its shard list for `entries` (over an earlier one)."""
    folder = store / NAME / FP[version]
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("shards-*.json"):
        old.unlink()
    listing = (json.dumps(entries, sort_keys=True, separators=(",", ":")) + "\n").encode()
    sha = hashlib.sha256(listing).hexdigest()
    (folder / f"shards-{sha[:16]}.json").write_bytes(listing)
    manifest = {
        "name": NAME, "fingerprint": FP[version], "format_version": 5,
        "inputs": {"source": {"files": [{"uri": "/data/a.parquet", "size": 1, "version": "1"}],
                              "format": "parquet", "key": "id", "labels": ["label"]},
                   "encoders": {"proj": {"weights_digest": "d" * 64}}, "rows_per_shard": 10},
        "encoders": [{"name": "proj", "kind": "torch", "input": "features", "dim": DIM,
                      "dtype": "float32", "weights_digest": "d" * 64, "identity": "i" * 64,
                      "trainable": False, "column": ""}],
        "key_column": "id", "label_columns": ["label"], "label_types": {"label": "int64"},
        "created": f"2024-0{month}-01T00:00:00+00:00", "fill_seconds": 1.0, "extra": {},
        "shard_list": {"path": f"shards-{sha[:16]}.json", "bytes": len(listing),
                       "sha256": sha},
        "totals": {"rows": sum(e["rows"] for e in entries),
                   "bytes": sum(e["bytes"] for e in entries), "shards": len(entries)}}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))


def keys(letter: str, keep: list[bool] | None = None) -> set[str]:
    rows = SHARDS[letter]
    return {f"k{i}" for j, i in enumerate(rows) if keep is None or keep[j]}


V1 = keys("A") | keys("B") | keys("C")
V2 = keys("A") | keys("B", B_IN_V2) | keys("D")
V3 = keys("A") | keys("B", B_IN_V3) | keys("D") | keys("E")


@pytest.fixture
def store(tmp_path) -> Path:
    """v1 <- v2 <- v3, as described above."""
    store = tmp_path / "store"
    f1, f2, f3 = (store / NAME / FP[v] for v in (1, 2, 3))
    a, b, c = (write_shard(f1, x) for x in "ABC")
    commit(store, 1, [a, b, c], 1)
    d = write_shard(f2, "D")
    commit(store, 2, [shared(a, 1), shared(b, 1, B_IN_V2), d], 2)
    e = write_shard(f3, "E")
    commit(store, 3, [shared(a, 1), shared(b, 1, B_IN_V3), shared(d, 2), e], 3)
    return store


def files(store: Path) -> dict[str, int]:
    return {str(p.relative_to(store)): p.stat().st_size for p in store.rglob("*")
            if p.is_file()}


def read_keys(store: Path, version: int) -> list[str]:
    return open_cache(NAME, str(store), FP[version]).read_table(columns=["id"]).column(
        "id").to_pylist()


def test_each_version_reads_its_rows_and_verifies(store):
    for version, want in ((1, V1), (2, V2), (3, V3)):
        got = read_keys(store, version)
        assert sorted(got) == sorted(want) and len(got) == len(want)
        report = verify(open_cache(NAME, str(store), FP[version]))
        assert report.ok and report.stray == {}, report.lines()


def test_verify_checks_the_shared_file_and_its_selection(store):
    cache = open_cache(NAME, str(store), FP[2])
    path = f"{vid(1)}/shards/part-{BLOCK}-{10:010d}.parquet"
    entries = json.loads((Path(cache.dir) / cache.manifest.shard_list["path"]).read_text())
    entries[1]["rows"] = 9  # a selection of 8 rows that says 9
    commit(store, 2, entries, 2)
    damaged = open_cache(NAME, str(store), FP[2])
    report = verify(damaged)  # the shard list names a bad entry: it is read no further
    [(listed, [why])] = report.bad.items()
    assert listed == damaged.manifest.shard_list["path"] and f"entry 1 ({path})" in why
    assert "row selection keeps 8 rows, the manifest says 9" in why


def test_duplicate_keys_count_only_the_rows_a_version_keeps(store):
    folder = store / NAME / FP[2]
    entries = json.loads(next(folder.glob("shards-*.json")).read_text())
    d = entries[2]
    shutil.copy(folder / d["path"], folder / "shards" / "dup.parquet")  # D again: 5 keys
    one = [i == 0 for i in range(5)]  # of which it keeps k30 only
    dup = {**d, "path": "shards/dup.parquet", "keep": encode(np.array(one)), "stored": 5,
           "rows": 1, "ranges": [[BLOCK, 30, 31]]}
    commit(store, 2, [*entries, dup], 2)
    report = verify(open_cache(NAME, str(store), FP[2]))
    assert report.duplicate_keys.count == 1 and not report.bad
    assert report.duplicate_keys.examples == {"k30": [d["path"], "shards/dup.parquet"]}


def test_a_version_s_files_that_other_versions_read_are_no_strays(store):
    v2 = open_cache(NAME, str(store), FP[2])
    assert strays(v2) == {} and read_by_others(v2) == {f"shards/part-{BLOCK}-{30:010d}.parquet"}
    f = write_shard(Path(v2.dir), "F")  # in v2's folder, not in its manifest
    assert set(strays(v2)) == {f["path"]} and strays(v2, {f["path"]}) == {}
    assert verify(v2).stray.keys() == {f["path"]}
    v3 = open_cache(NAME, str(store), FP[3])  # v3 reads it: no stray of v2 any more
    commit(store, 3, [*(e.to_json() for e in v3.manifest.shards), shared(f, 2)], 3)
    assert verify(v2).stray == {}
    assert sorted(read_keys(store, 3)) == sorted(V3 | keys("F"))
    assert raycache.gc(str(store), grace=0).strays == []


def test_gc_retain_1_keeps_the_files_the_newest_version_reads(store, capsys):
    before = files(store)
    dry = raycache.gc(str(store), retain=1)
    assert {r.usage.id for r in dry.removed} == {vid(1), vid(2)}
    assert files(store) == before
    c = f"{NAME}/{FP[1]}/shards/part-{BLOCK}-{20:010d}.parquet"
    kept = {f"{NAME}/{FP[1]}/shards/part-{BLOCK}-{s:010d}.parquet" for s in (0, 10)} | {
        f"{NAME}/{FP[2]}/shards/part-{BLOCK}-{30:010d}.parquet"}
    gone = {p for p in before if p.startswith((vid(1), vid(2))) and p not in kept}
    assert c in gone and dry.bytes == sum(before[p] for p in gone)

    assert main(["gc", "--store", str(store), "--retain", "1", "--delete"]) == 0
    out = capsys.readouterr().out
    assert f"read by {vid(3)}" in out and f"({dry.bytes} bytes)" in out
    after = files(store)
    assert set(before) - set(after) == gone and kept <= set(after)
    assert sorted(read_keys(store, 3)) == sorted(V3)
    assert verify(open_cache(NAME, str(store), FP[3])).ok

    # the folders left holding shared files: du says so; gc leaves them while v3 reads them
    states = {u.id: u.state for u in raycache.du(str(store))}
    assert states == {vid(1): "shared", vid(2): "shared", vid(3): "committed"}
    again = raycache.gc(str(store), retain=1, grace=0, delete=True)
    assert again.removed == [] and again.strays == [] and files(store) == after

    # once v3 goes too, they are swept (past the grace) like any folder without a manifest
    raycache.gc(str(store), retain=0, include_newest=True, grace=0, delete=True)
    assert files(store) == {}


def test_gc_sweeps_only_unread_files_of_a_folder_without_manifest(store):
    folder = store / NAME / FP[1]
    (folder / "manifest.json").unlink()  # v1 half gone, by hand
    shard = "shards/part-{}-{:010d}.parquet".format
    freed = sum(p.stat().st_size for p in folder.iterdir() if p.is_file()) + (
        folder / shard(BLOCK, 20)).stat().st_size  # its shard list and C
    result = raycache.gc(str(store), grace=0, delete=True)
    assert [(r.usage.id, r.freed) for r in result.removed] == [(vid(1), freed)]
    assert sorted(p.name for p in folder.rglob("*.parquet")) == [
        Path(shard(BLOCK, s)).name for s in (0, 10)]
    assert not list(folder.glob("shards-*.json"))
    for version in (2, 3):
        assert verify(open_cache(NAME, str(store), FP[version])).ok


def test_a_missing_shared_file_names_the_version_that_held_it(store, capsys):
    shutil.rmtree(store / NAME / FP[1])
    cache = open_cache(NAME, str(store), FP[2])
    report = verify(cache)
    path = f"{vid(1)}/shards/part-{BLOCK}-{0:010d}.parquet"
    assert set(report.shared.values()) == {vid(1)} and len(report.bad) == 2
    why = report.bad[path][0]
    assert f"shared from version {vid(1)}, removed?" in why
    assert str(store / NAME / FP[1] / "shards") in why
    assert main(["verify", f"{vid(2)}", "--store", str(store)]) == 1
    assert f"2 of them shared from older versions ({vid(1)})" in capsys.readouterr().err


def test_du_counts_own_and_shared_bytes(store, capsys):
    found = {u.id: u for u in raycache.du(str(store))}
    on_disk = files(store)

    def size(version: int, *starts: int) -> int:
        return sum(on_disk[f"{vid(version)}/shards/part-{BLOCK}-{s:010d}.parquet"]
                   for s in starts)

    v1, v2, v3 = found[vid(1)], found[vid(2)], found[vid(3)]
    assert sum(u.own_bytes + u.lent_bytes for u in found.values()) == sum(on_disk.values())
    assert all(u.bytes == sum(n for p, n in on_disk.items() if p.startswith(u.id))
               for u in found.values())
    assert (v1.lent_bytes, v1.shared_bytes) == (size(1, 0, 10), 0)
    assert (v2.lent_bytes, v2.shared_bytes) == (size(2, 30), size(1, 0, 10))
    assert (v3.lent_bytes, v3.shared_bytes) == (0, size(1, 0, 10) + size(2, 30))
    assert main(["du", "--store", str(store)]) == 0
    lines = capsys.readouterr().out.splitlines()
    line = next(x for x in lines if x.startswith(vid(3)))
    assert "own" in line and "shared from other versions" in line


def test_gc_keeps_every_shard_file_of_a_name_with_a_manifest_it_cannot_read(store):
    newer = store / NAME / ("9" * 24)  # of a newer format: what it shares is not known
    newer.mkdir()
    manifest = json.loads((store / NAME / FP[3] / "manifest.json").read_text())
    (newer / "manifest.json").write_text(json.dumps({**manifest, "format_version": 99}))
    shards = {p for p in files(store) if "/shards/" in p}
    with pytest.warns(DamagedCacheWarning):
        result = raycache.gc(str(store), retain=0, include_newest=True, delete=True)
    assert {r.usage.id for r in result.removed} == {vid(1), vid(2), vid(3)}
    assert "of a newer format: it may share them" in result.removed[0].line("removed")
    assert shards <= set(files(store))


def test_max_size_counts_what_removing_a_version_frees(store):
    total = sum(files(store).values())
    v1 = next(u for u in raycache.du(str(store)) if u.id == vid(1))
    limit = total - v1.own_bytes - 1  # v1 alone does not fit it: v2 goes too
    result = raycache.gc(str(store), max_size=limit, delete=True)
    assert {r.usage.id for r in result.removed} == {vid(1), vid(2)}
    assert sum(files(store).values()) == total - result.bytes <= limit
    assert sorted(read_keys(store, 3)) == sorted(V3)


def test_gc_keeps_every_shard_file_of_a_name_a_fill_writes_a_version_of(store):
    """A fill of a new version, still planning (a lease, no shard yet), may share any
    committed version's files: they stay while it runs; the rest of those versions goes."""
    from raycache._cache.lease import Lease
    from raycache._cache.store import Store

    shards = {p for p in files(store) if "/shards/" in p}
    with Lease(Store(str(store)), str(store / NAME / ("4" * 24))):
        result = raycache.gc(str(store), retain=1, delete=True)
    assert {r.usage.id for r in result.removed} == {vid(1), vid(2)}
    assert all("the fill writing" in r.line("removed") for r in result.removed)
    assert shards <= set(files(store))
    assert not (store / NAME / FP[1] / "manifest.json").exists()

"""A store's records never reach outside it: a shard entry whose path leaves its folder's
shards/ (`..`, absolute, a URI) or whose home is not a cache folder of the store is a
CorruptCache naming the entry on every read (verify, export), and repair deletes nothing outside
the store; kept-row bitmaps damaged by hand (checksums fixed) are named on every read, BAD in
verify, and repaired with no traceback (no Ray)."""

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raycache
from raycache import CorruptCache, CorruptShard
from raycache._cache.records import ShardEntry, ShardRecord
from raycache._cache.selection import decode, encode
from raycache._cli import main
from tests.conftest import separable, toy_fill
from tests.test_version_defects import edit_entries as edit_list

pytestmark = pytest.mark.timeout(300)


def config(root: Path, name: str) -> dict:
    return toy_fill(str(root / name), str(root / "store"), name=name, rows_per_shard=20,
                    in_process=True, compact_below=0)


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> Path:
    """`whole`: one version of 60 rows in 3 own shards; `ver`: a second version of 150 rows
    whose source lost two rows of its first file, sharing the first shards of the first in
    part (with a `keep`) and the rest whole."""
    root = tmp_path_factory.mktemp("confined")
    table = separable(n=150)
    (root / "whole").mkdir()
    pq.write_table(table.slice(0, 60), root / "whole" / "a.parquet")
    raycache.fill(config(root, "whole"))
    (root / "ver").mkdir()
    for i, name in enumerate("abc"):
        pq.write_table(table.slice(50 * i, 50), root / "ver" / f"{name}.parquet")
    raycache.fill(config(root, "ver"))
    keep = np.ones(50, bool)
    keep[[3, 30]] = False
    first = pq.read_table(root / "ver" / "a.parquet")
    pq.write_table(first.filter(pa.array(keep)), root / "ver" / "a.parquet")
    assert raycache.fill(config(root, "ver")).shared_rows
    return root


@pytest.fixture
def root(filled, tmp_path) -> Path:
    """A copy of the filled store beside the sources it was filled from (so repair re-reads
    them): tmp/store/<name>/<fingerprint>/../../../x is tmp/x, outside the store."""
    shutil.copytree(filled / "store", tmp_path / "store")
    for name in ("whole", "ver"):
        (tmp_path / name).symlink_to(filled / name)
    return tmp_path


def edit_entries(root: Path, name: str, edit: Callable[[list[dict]], None]) -> Path:
    """The newest version of `name` with its shard list edited by `edit`, its checksum fixed
    (as an edit by hand would); its folder."""
    folder = Path(raycache.open_cache(name, str(root / "store")).dir)
    edit_list(folder, edit)
    return folder


def cli(*args: str, store: Path) -> int:
    return main([*args, "--store", str(store)])


def test_a_folder_outside_the_store_survives_repair_and_verify_names_its_entry(root, capsys):
    victim = root / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")

    def point_out(entries):
        entries[1]["path"] = "../../../victim"

    edit_entries(root, "whole", point_out)
    store = root / "store"
    assert cli("verify", "whole", store=store) == 1
    out = capsys.readouterr().out
    assert cli("repair", "whole", store=store) == 0
    assert (victim / "precious.txt").read_text() == "keep me"
    assert "Traceback" not in capsys.readouterr().err
    assert "BAD shards-" in out and "entry 1 (../../../victim)" in out
    assert "expected shards/<file>" in out
    assert cli("verify", "whole", store=store) == 0
    assert raycache.open_cache("whole", str(store)).read_table().num_rows == 60


def test_a_parquet_file_outside_the_store_is_not_read_as_a_shard(root, capsys):
    """The outside file is a good copy of the shard its entry names (size and checksum match):
    before, verify passed it and export read it."""
    def point_out(entries):
        entries[0]["path"] = "../../../outside.parquet"

    shutil.copy(raycache.open_cache("whole", str(root / "store")).shard_paths()[0],
                root / "outside.parquet")
    edit_entries(root, "whole", point_out)
    store = root / "store"
    with pytest.raises(CorruptCache, match=r"entry 0 \(\.\./\.\./\.\./outside\.parquet\)"):
        raycache.open_cache("whole", str(store)).read_table()
    assert cli("verify", "whole", store=store) == 1
    assert "outside.parquet" in capsys.readouterr().out
    assert cli("export", "whole", "--to", str(root / "out.parquet"), store=store) == 3
    err = capsys.readouterr().err
    assert "entry 0" in err and "raycache repair whole" in err and "Traceback" not in err
    assert not (root / "out.parquet").exists()


@pytest.mark.parametrize("field, value", [
    ("path", "/shards/{file}"),  # absolute (joined to the folder, it names the file itself)
    ("path", "file:///{folder}/shards/{file}"),
    ("path", "shards\\..\\..\\{file}"),
    ("path", "shards/.."),
    ("home", "/{store}/{home}"),
    ("home", "file://{store}/{home}"),
    ("home", "ver/../{home}"),
    ("home", "{home}/.."),
], ids=["absolute", "uri", "backslash", "dotdot", "absolute-home", "uri-home", "dotdot-home",
        "deep-home"])
def test_absolute_uri_and_dotted_paths_and_homes_are_refused(root, field, value):
    store = root / "store"
    cache = raycache.open_cache("ver", str(store))
    entry = next(e for e in cache.manifest.shards if e.home)
    folder = Path(cache.dir)
    text = value.format(file=entry.path.split("/")[1], folder=str(folder).lstrip("/"),
                        store=str(store).lstrip("/"), home=entry.home)

    def bend(entries):
        next(e for e in entries if e.get("home"))[field] = text

    edit_entries(root, "ver", bend)
    with pytest.raises(CorruptCache) as err:
        raycache.open_cache("ver", str(store)).read_table()
    assert f"{field} {text!r}" in str(err.value) and "raycache repair ver" in str(err.value)
    report = raycache.verify(raycache.open_cache("ver", str(store)))
    [(listed, [why])] = report.bad.items()
    assert listed.startswith("shards-") and f"{field} {text!r}" in why


def test_each_way_out_is_refused_as_it_is_decoded():
    good = {"path": "shards/part-b-0000000000.parquet", "rows": 2, "bytes": 1, "sha256": "0",
            "source": "s", "ranges": [["b", 0, 2]]}
    assert ShardEntry.from_json(good).path == good["path"]
    assert ShardEntry.from_json({**good, "home": "docs/3f9c2a"}).home == "docs/3f9c2a"
    for field, value in [("path", "../../x"), ("path", "shards/../../x"), ("path", "/abs"),
                         ("path", "s3://bucket/x"), ("path", "shards/a/../../x"),
                         ("path", "other/x.parquet"), ("path", "shards/"), ("path", 7),
                         ("home", "docs"), ("home", "a/b/c"), ("home", "../x"),
                         ("home", ".hidden/x"), ("home", "s3://b/x")]:
        with pytest.raises(ValueError, match=f"{field} {value!r}"):
            ShardEntry.from_json({**good, field: value})
    with pytest.raises(ValueError, match="path '../x'"):  # a progress record: the same rule
        ShardRecord.from_json({"path": "../x", "rows": 1, "bytes": 1, "sha256": "0"})


def test_a_shard_list_named_outside_its_folder_is_not_read(root, capsys):
    folder = Path(raycache.open_cache("whole", str(root / "store")).dir)
    manifest = json.loads((folder / "manifest.json").read_text())
    shutil.copy(folder / manifest["shard_list"]["path"], root / "list.json")
    manifest["shard_list"]["path"] = "../../../list.json"
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CorruptCache, match="names its shard list '../../../list.json'"):
        raycache.open_cache("whole", str(root / "store")).read_table()
    assert cli("repair", "whole", store=root / "store") == 0
    assert (root / "list.json").exists()
    assert cli("verify", "whole", store=root / "store") == 0


def test_an_inline_entry_of_an_older_format_is_refused_too(tmp_path):
    from tests.test_compat import write_cache

    store = tmp_path / "store"
    write_cache(store, 2, "d" * 64)  # shards listed in manifest.json itself (format 2)
    path = store / "old2" / ("2" * 24) / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["shards"][0]["path"] = "/etc/hostname"
    path.write_text(json.dumps(manifest))
    with pytest.raises(CorruptCache, match="its manifest .* path '/etc/hostname' is not a file"):
        raycache.open_cache("old2", str(store), "2" * 24)


def past_the_end(entries):
    """A keep over more rows than the file holds, its counts raised to match."""
    e = next(e for e in entries if e.get("keep"))
    e["keep"], e["stored"], e["rows"] = encode(np.ones(24, bool)), 24, 24


def removed(entries):
    del next(e for e in entries if e.get("keep"))["keep"]


def removed_with_its_count(entries):
    e = next(e for e in entries if e.get("keep"))
    del e["keep"], e["stored"]


def swapped(entries):
    """Two selections of as many kept rows each traded places."""
    a, b = [e for e in entries if e.get("keep")][:2]
    assert decode(a["keep"], a["stored"]).sum() == decode(b["keep"], b["stored"]).sum()
    a["keep"], b["keep"] = b["keep"], a["keep"]


@pytest.mark.parametrize("damage, error, named, verified", [
    (past_the_end, CorruptCache, "its ranges place 20 rows", "entry 0"),
    (removed, CorruptCache, "stored=20 rows in its file but rows=19 read, with no row "
                            "selection", "entry 0"),
    (removed_with_its_count, CorruptShard, "reads all its 19 rows for a shard that holds 20",
     "20 rows, the manifest says 19"),
    (swapped, CorruptCache, "keeps rows its version left out", "entry 0"),
], ids=["past-the-end", "removed", "removed-with-its-count", "swapped"])
def test_a_damaged_keep_is_named_on_every_read_and_repaired(root, capsys, damage, error, named,
                                                            verified):
    store = root / "store"
    want = raycache.open_cache("ver", str(store)).read_table(["id", "label"]).sort_by("id")
    edit_entries(root, "ver", damage)
    for verify in (True, False):
        with pytest.raises(error, match=named) as err:
            raycache.open_cache("ver", str(store)).read_table(verify=verify)
        assert "raycache repair ver" in str(err.value)
    with pytest.raises(error, match=named):  # training reads its shares as readers do
        raycache.train({"cache": "ver", "store": {"uri": str(store)}, "num_workers": 0,
                        "progress": False, "label": "label", "epochs": 1})
    assert cli("verify", "ver", store=store) == 1
    out = capsys.readouterr().out
    assert named in out or error is CorruptShard
    assert verified in out
    assert cli("repair", "ver", store=store) == 0
    assert "Traceback" not in capsys.readouterr().err
    assert cli("verify", "ver", store=store) == 0
    fixed = raycache.open_cache("ver", str(store))
    assert fixed.read_table(["id", "label"]).sort_by("id").equals(want)


@pytest.mark.s3
def test_on_s3_a_key_outside_the_versions_shards_is_not_read_nor_removed(bucket, tmp_path,
                                                                        capsys):
    """S3 keys are literal (`..` is no parent there): a good copy of a shard planted at the key
    an entry's `../` names is read as a shard before; never now, and repair leaves it."""
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    pq.write_table(separable(n=40), tmp_path / "a.parquet")
    store = f"{bucket}/caches"
    cache = raycache.fill(toy_fill(str(tmp_path / "a.parquet"), store, rows_per_shard=20,
                                   in_process=True)).cache
    folder = cache.uri.removeprefix("s3://")
    planted = f"{folder}/../../../outside.parquet"
    fs.pipe_file(planted, fs.cat_file(cache.shard_urls()[0]))
    manifest = json.loads(fs.cat_file(f"{folder}/manifest.json"))
    entries = json.loads(fs.cat_file(f"{folder}/{manifest['shard_list']['path']}"))
    entries[0]["path"] = "../../../outside.parquet"
    listing = (json.dumps(entries, sort_keys=True, separators=(",", ":")) + "\n").encode()
    sha = hashlib.sha256(listing).hexdigest()
    fs.pipe_file(f"{folder}/shards-{sha[:16]}.json", listing)
    manifest["shard_list"] = {"path": f"shards-{sha[:16]}.json", "bytes": len(listing),
                              "sha256": sha}
    fs.pipe_file(f"{folder}/manifest.json", json.dumps(manifest).encode())
    with pytest.raises(CorruptCache, match=r"entry 0 \(\.\./\.\./\.\./outside\.parquet\)"):
        raycache.open_cache("toy", store).read_table()
    assert main(["verify", "toy", "--store", store]) == 1
    assert main(["repair", "toy", "--store", store]) == 0
    assert "Traceback" not in capsys.readouterr().err
    assert fs.exists(planted) and main(["verify", "toy", "--store", store]) == 0

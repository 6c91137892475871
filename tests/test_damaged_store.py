"""A damaged store: one cache whose manifest or shard list cannot be read never breaks the others
(ls, du, gc, fills pass it by with one warning), reading it gives a CorruptCache that names the
file and the fix, verify flags it, repair or a fill again re-derives it, gc --damaged removes it;
a store path that is a file, or an S3 store that cannot be reached, gives a StoreError; a failed
write leaves no temporary file (no Ray)."""

import errno
import json
import os
import shutil
import warnings
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import raycache
from raycache import CorruptCache, DamagedCacheWarning, StoreError
from raycache._cache.store import Store
from raycache._cli import main
from tests.conftest import free_port, separable, toy_fill

pytestmark = pytest.mark.timeout(120)

DAMAGE = {
    "truncated": lambda text: text[: len(text) // 2].encode(),
    "garbage": lambda text: b"\x00\xff not json \xfe",
    "a JSON list": lambda text: b"[1, 2]",
    "no encoders": lambda text: json.dumps({**json.loads(text), "encoders": None}).encode(),
}


def encoder(out_dim: int) -> dict:
    return {"name": "proj", "kind": "torch", "input": "features",
            "factory": "toy_encoders:projection", "kwargs": {"in_dim": 8, "out_dim": out_dim}}


def config(root: Path, name: str, out_dim: int) -> dict:
    """A fill into root/store from root/source (a link to the module's source, so that every
    copy of the store has the fingerprints of the fills that made it)."""
    return toy_fill(str((root / "source").resolve()), str(root / "store"), name=name,
                    rows_per_shard=30, in_process=True, encoders=[encoder(out_dim)])


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> Path:
    """toy (16 and 8 wide) and twin (16 wide, the same encoder as toy's first), filled once."""
    root = tmp_path_factory.mktemp("filled")
    (root / "source").mkdir()
    pq.write_table(separable(n=60), root / "source" / "a.parquet")
    for name, out_dim in (("toy", 16), ("toy", 8), ("twin", 16)):
        raycache.fill(config(root, name, out_dim))
    return root


@pytest.fixture
def root(filled, tmp_path) -> Path:
    shutil.copytree(filled / "store", tmp_path / "r" / "store")
    (tmp_path / "r" / "source").symlink_to(filled / "source")
    return tmp_path / "r"


def folder(root: Path, name: str, out_dim: int) -> Path:
    """The cache folder of a fill of `name` with a `out_dim` wide encoder."""
    for manifest in (root / "store" / name).glob("*/manifest.json"):
        try:
            m = json.loads(manifest.read_text())
        except ValueError:  # damaged already
            continue
        if m["encoders"][0]["dim"] == out_dim:
            return manifest.parent
    raise AssertionError(f"no {name} {out_dim}")


def damage_manifest(root: Path, how: str = "truncated") -> Path:
    """toy's 8-wide fill with a manifest damaged `how`."""
    path = folder(root, "toy", 8) / "manifest.json"
    path.write_bytes(DAMAGE[how](path.read_text()))
    return path


def damage_shard_list(root: Path, name: str = "toy", out_dim: int = 16) -> Path:
    path = next(folder(root, name, out_dim).glob("shards-*.json"))
    path.write_text(path.read_text()[:40])
    return path


def damaged_warnings(caught: list) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, DamagedCacheWarning)]


@pytest.mark.parametrize("how", list(DAMAGE))
def test_ls_and_du_pass_a_damaged_manifest_by_with_one_warning_naming_it(root, how):
    path = damage_manifest(root, how)
    store = str(root / "store")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        listed = raycache.ls(store)
    assert sorted(c.name for c in listed) == ["toy", "twin"]
    [message] = damaged_warnings(caught)
    assert str(path) in message and "--damaged --delete" in message
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        usage = {u.dir: u for u in raycache.du(store)}
    assert len(damaged_warnings(caught)) == 1
    assert usage[str(path.parent)].damaged and not usage[str(path.parent)].committed
    assert sum(u.committed for u in usage.values()) == 2


def test_opening_a_damaged_cache_names_the_file_and_the_fix(root):
    path = damage_manifest(root)
    store = str(root / "store")
    fp = path.parent.name
    with pytest.raises(CorruptCache, match="manifest") as err:
        raycache.open_cache("toy", store, fp)
    assert err.value.uri == str(path) and "fill it again" in str(err.value)
    with pytest.raises(CorruptCache, match="no known newest fill"):  # it may be the newest
        raycache.open_cache("toy", store)
    assert raycache.open_cache("twin", store).name == "twin"
    shard_list = damage_shard_list(root)
    cache = raycache.open_cache("toy", store, shard_list.parent.name)
    with pytest.raises(CorruptCache, match="shard list") as err:
        cache.read_table()
    assert err.value.uri == str(shard_list) and "raycache repair" in str(err.value)


def test_cli_verify_and_inspect_name_a_damaged_cache_and_exit_non_zero(root, capsys):
    path = damage_manifest(root)
    store = str(root / "store")
    assert main(["verify", f"toy/{path.parent.name}", "--store", store]) == 3
    assert str(path) in capsys.readouterr().err
    assert main(["inspect", f"toy/{path.parent.name}", "--store", store]) == 3
    assert str(path) in capsys.readouterr().err
    shard_list = damage_shard_list(root)
    assert main(["verify", f"toy/{shard_list.parent.name}", "--store", store]) == 1
    out = capsys.readouterr().out
    assert f"BAD {shard_list.name}" in out and str(shard_list) in out
    assert main(["inspect", f"toy/{shard_list.parent.name}", "--json", "--store", store]) == 3
    assert str(shard_list) in capsys.readouterr().err
    assert main(["ls", store]) == 0  # the listing goes on, with one warning line
    captured = capsys.readouterr()
    assert captured.err.count("raycache ls: warning: cache toy/") == 1
    assert "twin/" in captured.out


def test_repair_re_encodes_a_damaged_shard_list(root, capsys):
    shard_list = damage_shard_list(root)
    store = str(root / "store")
    label = f"toy/{shard_list.parent.name}"
    result = raycache.repair("toy", store, shard_list.parent.name, progress=False,
                             in_process=True)
    assert not result.hit and result.cache.manifest.rows == 60
    assert main(["verify", label, "--store", store]) == 0
    assert "OK" in capsys.readouterr().out


def test_a_fill_over_its_own_damaged_manifest_fills_it_again(root):
    path = damage_manifest(root)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = raycache.fill(config(root, "toy", 8))
    [message] = damaged_warnings(caught)
    assert str(path) in message and "Filling it again" in message
    assert not result.hit and result.cache.dir == str(path.parent)
    assert raycache.verify(raycache.open_cache("toy", str(root / "store"),
                                               path.parent.name)).ok


def test_a_fill_passes_damaged_caches_by_and_reuses_the_others(root):
    """toy 8 (manifest) and toy 16 (shard list) damaged: twin's rows are reused, one warning
    each for the damaged."""
    damage_manifest(root)
    damage_shard_list(root, "toy", 16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = raycache.fill(config(root, "third", 16))
    assert result.reused_rows == 60 and result.encoded_rows == 0
    found = damaged_warnings(caught)
    assert len(found) == 2 and all("toy/" in m for m in found)


def test_gc_keeps_damaged_caches_unless_asked_and_then_removes_only_them(root):
    path = damage_manifest(root)
    shard_list = damage_shard_list(root, "twin", 16)
    store = str(root / "store")
    with pytest.warns(DamagedCacheWarning):
        kept = raycache.gc(store, grace="0s", delete=True)
    assert not kept.removed and path.exists() and shard_list.exists()
    assert {r.usage.dir for r in kept.kept} == {str(path.parent), str(shard_list.parent)}
    assert all("--damaged" in r.reason for r in kept.kept)
    with pytest.warns(DamagedCacheWarning):
        gone = raycache.gc(store, grace="0s", delete=True, damaged=True)
    assert {r.usage.dir for r in gone.removed} == {str(path.parent), str(shard_list.parent)}
    assert not path.parent.exists() and not shard_list.parent.exists()
    assert [c.name for c in raycache.ls(store)] == ["toy"]
    assert raycache.verify(raycache.ls(store)[0]).ok


def test_a_manifest_of_a_newer_format_is_listed_as_unread_and_never_removed(root):
    path = folder(root, "toy", 8) / "manifest.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "format_version": 99}))
    store = str(root / "store")
    with pytest.warns(DamagedCacheWarning, match="format_version=99"):
        assert len(raycache.ls(store)) == 2
    with pytest.warns(DamagedCacheWarning):
        result = raycache.gc(store, grace="0s", delete=True, damaged=True)
    assert not result.removed and path.exists()


def test_ls_of_a_file_is_a_store_error(root, capsys):
    manifest = folder(root, "toy", 16) / "manifest.json"
    assert main(["ls", str(manifest)]) == 3
    assert "is a file, not a folder" in capsys.readouterr().err
    with pytest.raises(StoreError, match="is a file, not a folder"):
        raycache.du(str(manifest))


@pytest.mark.parametrize("command", [["ls", "{store}"], ["du", "--store", "{store}"],
                                     ["inspect", "toy", "--store", "{store}"],
                                     ["verify", "toy", "--store", "{store}"],
                                     ["gc", "--store", "{store}"]])
@pytest.mark.parametrize("problem", ["no bucket", "closed port"])
def test_an_unreachable_s3_store_is_a_store_error(s3_endpoint, monkeypatch, capsys, command,
                                                  problem):
    store = "s3://rc-no-such-bucket/store"
    if problem == "closed port":
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    code = main([part.format(store=store) for part in command])
    err = capsys.readouterr().err
    assert code == 3 and f"store {store!r} is unreachable" in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("exclusive", [False, True])
def test_a_failed_write_leaves_no_temporary_file(tmp_path, monkeypatch, exclusive):
    store = Store(str(tmp_path))

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(StoreError, match="No space left on device"):
        store.write_json(store.path("a", "manifest.json"), {"x": 1}, exclusive=exclusive)
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == []


def test_a_damaged_run_record_is_listed_as_such_and_du_and_gc_go_on(root, capsys):
    cache = folder(root, "toy", 16)
    (cache / "runs" / "r1").mkdir(parents=True)
    (cache / "runs" / "r1" / "run.json").write_text('{"status": "runn')
    store = str(root / "store")
    [run] = raycache.list_runs(raycache.open_cache("toy", store, cache.name))
    assert run.name == "r1" and "damaged" in run.status
    assert main(["du", "--store", store]) == 0
    assert main(["gc", "--store", store, "--retain", "0", "--include-newest"]) == 0
    assert f"would remove toy/{cache.name}" in capsys.readouterr().out


def test_a_damaged_progress_record_is_passed_by_and_its_rows_encoded_again(root, monkeypatch):
    import toy_encoders

    cfg = config(root, "flaky", 16)
    cfg["encoders"][0]["factory"] = "toy_encoders:flaky_projection"
    monkeypatch.setattr(toy_encoders, "FAIL_AT", 2)  # the second shard's block fails
    with pytest.raises(Exception, match="failed on purpose"):
        raycache.fill({**cfg, "block_rows": 30})
    [record] = (root / "store" / "flaky").glob("*/_progress/*.json")
    record.write_text("{")
    monkeypatch.setattr(toy_encoders, "FAIL_AT", None)
    with pytest.warns(UserWarning, match="progress record .* cannot be read"):
        result = raycache.fill({**cfg, "block_rows": 30})
    assert result.encoded_rows == 60 and result.resumed_rows == 0
    assert raycache.verify(result.cache).ok

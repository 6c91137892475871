"""What upkeep commands say and take: compact reports itself as a compaction with the rows it
copied, the CLI takes `--grace 0` as the SDK takes grace=0, and `raycache inspect` shows a
cache filled from data in memory (no Ray)."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raycache
from raycache._cli import main
from raycache._cli.scripting import ERROR
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(300)


def test_compact_says_what_it_compacted(tmp_path, capsys):
    (tmp_path / "source").mkdir()
    table = separable(n=200)
    pq.write_table(table, tmp_path / "source" / "a.parquet", row_group_size=50)
    store = str(tmp_path / "store")
    cfg = toy_fill(str(tmp_path / "source"), store, rows_per_shard=50, in_process=True,
                   compact_below=0)
    raycache.fill(cfg)
    data = table.to_pydict()
    for i in range(0, 200, 2):
        data["features"][i] = [x + 1.0 for x in data["features"][i]]
    pq.write_table(pa.table(data, schema=table.schema), tmp_path / "source" / "a.parquet",
                   row_group_size=50)
    raycache.fill(cfg)
    assert main(["compact", "toy", "--store", store, "--below", "0.9", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("compact toy/") and "repair" not in out
    assert "100 kept rows of sparse or small shared shards copied" in out
    assert main(["compact", "toy", "--store", store, "--no-progress"]) == 0
    assert "no shared shard to compact" in capsys.readouterr().out


def test_gc_takes_grace_0_on_the_command_line(tmp_path, capsys):
    folder = tmp_path / "store" / "toy" / ("0" * 24)
    (folder / "shards").mkdir(parents=True)
    (folder / "shards" / "part-x.parquet").write_bytes(b"x")  # an abandoned fill
    assert main(["gc", "--store", str(tmp_path / "store"), "--grace", "0", "--delete"]) == 0
    assert not folder.exists()
    assert main(["gc", "--store", str(tmp_path / "store"), "--grace", "7"]) == ERROR  # 7 what?
    assert "--grace='7': expected a number and a unit" in capsys.readouterr().err


def test_inspect_shows_a_cache_filled_from_data_in_memory(tmp_path, capsys):
    cfg = toy_fill("", str(tmp_path / "store"), in_process=True)
    cfg["source"] = {"data": separable(n=30), "key": "id", "labels": ["label"]}
    cache = raycache.fill(cfg).cache
    assert main(["inspect", "toy", "--store", str(tmp_path / "store")]) == 0
    out = capsys.readouterr().out
    digest = cache.manifest.inputs["source"]["files"][0]["sha256"]
    assert f"data in memory (pyarrow.Table, 30 rows, sha256 {digest[:16]})" in out


@pytest.mark.parametrize("flags", [None, [], ["--keep-runs"], ["--remove-runs"]])
def test_gc_keeps_the_trained_heads_of_what_it_removes_unless_asked(tmp_path, capsys, flags):
    """A head a server or a script loads outlives its cache's removal by default; only
    --remove-runs takes it (--keep-runs, the default, still reads); None: the SDK's gc."""
    (tmp_path / "source").mkdir()
    pq.write_table(separable(n=120), tmp_path / "source" / "a.parquet")
    store = str(tmp_path / "store")
    cfg = toy_fill(str(tmp_path / "source"), store, in_process=True)
    v1 = raycache.fill(cfg).cache
    run = raycache.train({"cache": "toy", "store": {"uri": store}, "epochs": 1,
                          "num_workers": 0, "progress": False})
    pq.write_table(separable(n=120, seed=3), tmp_path / "source" / "a.parquet")
    raycache.fill(cfg)
    args = ["gc", "--store", store, "--retain", "1", "--delete"]
    if flags is None:
        print("\n".join(raycache.gc(store, retain=1, delete=True).lines()))
    else:
        assert main(args + flags) == 0
    keep_runs = flags != ["--remove-runs"]
    out = capsys.readouterr().out
    assert f"removed toy/{v1.fingerprint}" in out
    assert not (tmp_path / "store" / "toy" / v1.fingerprint / "manifest.json").exists()
    if keep_runs:
        assert "its trained heads, kept (runs/; --remove-runs removes them)" in out
        head = raycache.load_head(run.checkpoint)  # a head loads without its cache
        assert head.spec.fingerprint == v1.fingerprint
        assert not list((tmp_path / "store" / "toy" / v1.fingerprint).glob("shards/*"))
        assert main(args + ["--grace", "0", "--include-newest", "--retain", "0"]) == 0
        assert raycache.load_head(run.checkpoint).spec.fingerprint == v1.fingerprint
    else:
        assert not (tmp_path / "store" / "toy" / v1.fingerprint).exists()

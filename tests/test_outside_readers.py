"""Readers outside raycache get exactly a version's rows: the files `shard_urls()` gives are read
whole, and the rows of the files a version shares in part are in its kept-rows list, joined on
the files' row numbers, by real DuckDB, Polars and pyarrow, on a version with edits, appends and
removals (the same keys and embeddings as read_table)."""

import hashlib
import json
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import raycache
from raycache._cli import main
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(300)

DIM = 16


@pytest.fixture
def versions(tmp_path) -> tuple[Path, raycache.Cache, raycache.Cache]:
    """v1: files a, b, c of 200 rows; v2: 5 inputs and 5 labels of b edited, 7 rows of a
    removed and 20 appended to it, c removed, d added (compaction off, so a's and b's shards
    are shared with selections)."""
    src = tmp_path / "source"
    src.mkdir()
    table = separable(n=600)
    for i, name in enumerate("abc"):
        pq.write_table(table.slice(200 * i, 200), src / f"{name}.parquet", row_group_size=50)
    cfg = toy_fill(str(src), str(tmp_path / "store"), rows_per_shard=50, in_process=True,
                   compact_below=0)
    v1 = raycache.fill(cfg).cache

    def rewrite(name: str, change) -> None:
        data = pq.read_table(src / f"{name}.parquet").to_pydict()
        change(data)
        pq.write_table(pa.table(data, schema=table.schema), src / f"{name}.parquet",
                       row_group_size=50)

    def edit_b(d):
        for i in range(5):
            d["features"][i] = [x + 1.0 for x in d["features"][i]]
        for i in range(100, 105):
            d["label"][i] = (d["label"][i] + 1) % 3

    def remove_and_append_a(d):
        gone = {3, 60, 61, 120, 150, 151, 199}
        extra = separable(n=20, seed=7).to_pydict()
        extra["id"] = [f"app-{i}" for i in range(20)]
        for k in d:
            d[k] = [v for i, v in enumerate(d[k]) if i not in gone] + extra[k]
    rewrite("b", edit_b)
    rewrite("a", remove_and_append_a)
    (src / "c.parquet").unlink()
    more = separable(n=30, seed=9).to_pydict()
    more["id"] = [f"new-{i}" for i in range(30)]
    pq.write_table(pa.table(more, schema=table.schema), src / "d.parquet")
    v2 = raycache.fill(cfg).cache
    assert v2.manifest.rows == 200 - 7 + 20 + 200 + 30
    assert any(s.keep for s in v2.manifest.shards) and any(s.home for s in v2.manifest.shards)
    return tmp_path / "store", v1, v2


def expected(cache: raycache.Cache) -> dict[str, bytes]:
    """key -> embedding bytes, as raycache reads the version."""
    t = cache.read_table(["id", "proj"])
    vecs = np.stack(t.column("proj").to_numpy(zero_copy_only=False)).astype("<f4")
    return dict(zip(t.column("id").to_pylist(), (v.tobytes() for v in vecs), strict=True))


def store_prefix(store: Path) -> str:
    return str(store.resolve()) + "/"


def test_shard_urls_alone_are_only_the_files_read_whole(versions):
    _, _, v2 = versions
    whole = pq.read_table(v2.shard_urls(), columns=["id"]).column("id").to_pylist()
    keys = set(expected(v2))
    assert len(whole) == len(set(whole)) and set(whole) < keys  # no stale nor removed row
    kept = v2.kept_rows()
    assert kept.num_rows == v2.manifest.rows - len(whole)


def test_duckdb_reads_exactly_the_version_s_rows(versions):
    store, _, v2 = versions
    want = expected(v2)
    kept_url = v2.kept_rows_url()
    assert kept_url and Path(kept_url).parent == Path(v2.dir)
    partial = [r[0] for r in duckdb.sql(
        f"select distinct '{store_prefix(store)}' || file from read_parquet('{kept_url}') "
        "order by 1").fetchall()]
    rows = duckdb.execute(
        "select id, proj from read_parquet($whole) union all "
        "select s.id, s.proj from read_parquet($partial, filename = true, "
        "file_row_number = true) s join read_parquet($kept) k "
        "on s.filename = $prefix || k.file and s.file_row_number = k.row",
        {"whole": v2.shard_urls(), "partial": partial, "kept": kept_url,
         "prefix": store_prefix(store)}).fetchall()
    got = {k: bytes(v) for k, v in rows}
    assert len(rows) == len(got) == v2.manifest.rows  # no key twice
    assert got == want


def test_polars_reads_exactly_the_version_s_rows(versions):
    pl = pytest.importorskip("polars")  # pinned in the test extra; here for a slim install
    _, _, v2 = versions
    kept = pl.from_arrow(v2.kept_rows())
    partial = kept.get_column("file").unique().sort().to_list()
    parts = (pl.scan_parquet(partial, include_file_paths="file")
             .with_columns(row=pl.int_range(pl.len(), dtype=pl.Int64).over("file"))
             .join(kept.lazy(), on=["file", "row"], how="semi")
             .select("id", "proj"))
    frame = pl.concat([pl.scan_parquet(v2.shard_urls()).select("id", "proj"), parts]).collect()
    got = dict(zip(frame.get_column("id").to_list(), frame.get_column("proj").to_list(),
                   strict=True))
    assert frame.height == len(got) == v2.manifest.rows
    assert got == expected(v2)


def test_pyarrow_with_the_kept_rows_list_from_the_store_alone(versions):
    """No raycache: the manifest names the kept-rows list; its files' rows are taken."""
    store, _, v2 = versions
    manifest = json.loads((Path(v2.dir) / "manifest.json").read_text())
    rec = manifest["extra"]["kept_rows"]
    blob = (Path(v2.dir) / rec["path"]).read_bytes()
    assert len(blob) == rec["bytes"] and hashlib.sha256(blob).hexdigest() == rec["sha256"]
    kept = pq.read_table(Path(v2.dir) / rec["path"])
    assert kept.num_rows == rec["rows"]
    tables = [pq.read_table(u, columns=["id", "proj"]) for u in v2.shard_urls()]
    for file in sorted(set(kept.column("file").to_pylist())):
        rows = kept.filter(pc.equal(kept.column("file"), file)).column("row")
        tables.append(pq.read_table(store / file, columns=["id", "proj"]).take(rows))
    t = pa.concat_tables(tables)
    got = dict(zip(t.column("id").to_pylist(),
                   (bytes(v) for v in t.column("proj").to_pylist()), strict=True))
    assert got == expected(v2)


def test_a_version_that_reads_every_file_whole_has_no_kept_rows(versions):
    _, v1, _ = versions
    assert v1.kept_rows_url() is None and v1.kept_rows().num_rows == 0
    assert len(pq.read_table(v1.shard_urls())) == v1.manifest.rows


def test_the_kept_rows_list_is_no_stray_and_a_re_commit_replaces_it(versions):
    store, _, v2 = versions
    report = raycache.verify(v2)
    assert report.ok and not report.stray
    before = v2.kept_rows_url()
    assert main(["compact", "toy", "--store", str(store), "--below", "1"]) == 0
    after = raycache.open_cache("toy", str(store))
    assert after.fingerprint == v2.fingerprint and after.kept_rows_url() is None
    assert not Path(before).exists()  # the compacted version reads its files whole
    assert expected(after) == expected(v2)

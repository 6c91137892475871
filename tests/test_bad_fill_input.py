"""Bad fill input meets a clear raycache error that names the file (and row or column), what
was expected and the fix, before any work where the input allows; never a library's own
exception, and never a committed cache."""

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from toy_encoders import WORDS, tiny_text_model

import raycache
from raycache import ConfigError, SourceError, StoreUnavailable
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> str:
    """A tiny hf-text encoder, for text sources."""
    return tiny_text_model(str(tmp_path_factory.mktemp("model")))


def text_fill(source: Path, store: Path, model: str, **over) -> dict:
    return {"name": "text", "source": {"path": str(source), "labels": ["label"]},
            "encoders": [{"name": "t", "kind": "hf-text", "input": "text", "path": model}],
            "store": {"uri": str(store)}, "rows_per_shard": 100, "progress": False,
            "in_process": True, **over}


def text_rows(n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"id": f"t{i:05d}", "text": " ".join(rng.choice(WORDS, 6)), "label": i % 2}
            for i in range(n)]


def committed(store: Path) -> list[Path]:
    return list(store.rglob("manifest.json"))


@pytest.mark.parametrize("suffix", ["jsonl", "csv"])
def test_an_empty_text_file_is_named(tmp_path, model, suffix):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / f"a.{suffix}").write_text("")
    with pytest.raises(SourceError, match=rf"a\.{suffix}' is empty \(0 bytes\).*remove it"):
        raycache.fill(text_fill(tmp_path / "src", tmp_path / "store", model))
    assert not committed(tmp_path / "store")


def test_a_yaml_syntax_error_names_the_file_line_and_column(tmp_path):
    path = tmp_path / "fill.yaml"
    path.write_text("name: toy\nsource:\n  path: [a.parquet, b.parquet\nstore: {uri: s}\n")
    with pytest.raises(ConfigError) as err:
        raycache.fill(str(path))
    message = str(err.value)
    assert "fill.yaml', line 4, column 6: not valid YAML" in message
    assert "expected ',' or ']'" in message


def test_column_types_that_differ_between_files_are_named_before_any_work(tmp_path):
    (tmp_path / "src").mkdir()
    table = separable(n=100)
    pq.write_table(table, tmp_path / "src" / "a.parquet")
    pq.write_table(table.set_column(0, "id", pa.array(range(100))), tmp_path / "src" / "b.parquet")
    with pytest.raises(SourceError) as err:
        raycache.fill(toy_fill(str(tmp_path / "src"), str(tmp_path / "store"), in_process=True))
    message = str(err.value)
    assert "'id' is string in" in message and "a.parquet" in message
    assert "but int64 in" in message and "b.parquet" in message and "cast it to string" in message
    assert not list((tmp_path / "store").rglob("*.parquet"))  # nothing encoded


def test_a_csv_value_that_is_not_utf8_is_named_at_plan_time(tmp_path, model):
    csv = tmp_path / "a.csv"
    csv.write_bytes(b"id,text,label\nt1,this that,0\nt2,caf\xe9 and,1\n")
    with pytest.raises(SourceError, match=r"a\.csv': column 'text' holds text that is not "
                                          r"UTF-8.*re-encode the file"):
        raycache.fill(text_fill(csv, tmp_path / "store", model))


def test_a_csv_value_that_is_not_utf8_past_the_first_block_is_named_with_its_row(
        tmp_path, model):
    rows = text_rows(40_000)  # past pyarrow's first block (1 MiB), which the plan reads
    lines = [f"{r['id']},{r['text']},{r['label']}".encode() for r in rows]
    lines[39_000] = b"t39000,caf\xe9 and,0"
    csv = tmp_path / "a.csv"
    csv.write_bytes(b"id,text,label\n" + b"\n".join(lines) + b"\n")
    with pytest.raises(SourceError, match=r"a\.csv': column 'text' holds text that is not "
                                          r"UTF-8 \(data row 39001: b'caf\\xe9 and'\)"):
        raycache.fill(text_fill(csv, tmp_path / "store", model))
    assert not committed(tmp_path / "store")


def null_keyed(tmp_path: Path) -> str:
    """100 rows, rows 3 and 70 without a key."""
    (tmp_path / "src").mkdir()
    table = separable(n=100)
    ids = table.column("id").to_pylist()
    ids[3] = ids[70] = None
    pq.write_table(table.set_column(0, "id", pa.array(ids)), tmp_path / "src" / "a.parquet")
    return str(tmp_path / "src")


NULL_KEYS = (r"2 row\(s\) have no key \(null in column 'id'\), the first in '.*a\.parquet' at "
             r"row 3.*source\.key")


def test_null_keys_are_counted_and_named(tmp_path):
    cfg = toy_fill(null_keyed(tmp_path), str(tmp_path / "store"), in_process=True)
    cfg["source"]["duplicates"] = "first"  # nulls are no key to keep one copy of
    with pytest.raises(SourceError, match=NULL_KEYS):
        raycache.fill(cfg)
    assert not committed(tmp_path / "store")


@pytest.mark.ray
def test_null_keys_are_counted_and_named_by_the_cluster_key_scan(ray_session, tmp_path,
                                                                monkeypatch):
    from raycache._fill import keys

    monkeypatch.setattr(keys, "DRIVER_ROWS", 0)  # the large fill's group-by on Ray Data
    cfg = toy_fill(null_keyed(tmp_path), str(tmp_path / "store"), in_process=False,
                   rows_per_shard=50)
    with pytest.raises(SourceError, match=NULL_KEYS):
        raycache.fill(cfg)
    assert not committed(tmp_path / "store")


def test_a_file_that_is_not_parquet_is_named(tmp_path):
    (tmp_path / "src").mkdir()
    pq.write_table(separable(n=50), tmp_path / "src" / "a.parquet")
    (tmp_path / "src" / "b.parquet").write_text("id,features\n1,2\n")
    with pytest.raises(SourceError, match=r"b\.parquet' cannot be read as parquet \(ArrowInvalid"
                                          r".*set source\.format"):
        raycache.fill(toy_fill(str(tmp_path / "src"), str(tmp_path / "store")))


def test_a_key_column_of_mixed_types_is_named(tmp_path, model):
    rows = text_rows(10)
    rows[4]["id"] = 4
    path = tmp_path / "a.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(SourceError, match=r"a\.jsonl' cannot be read as jsonl .*Column\(/id\) "
                                          r"changed from string to number.*one type in every row"):
        raycache.fill(text_fill(path, tmp_path / "store", model))


def test_a_glob_that_matches_nothing_says_so(tmp_path):
    with pytest.raises(SourceError, match=r"\*\.parquet' matches no files"):
        raycache.fill(toy_fill(str(tmp_path / "*.parquet"), str(tmp_path / "store")))


@pytest.mark.parametrize("suffix", ["parquet", "csv"])
def test_a_source_of_no_rows_commits_nothing(tmp_path, model, suffix):
    path = tmp_path / f"a.{suffix}"
    if suffix == "parquet":
        pq.write_table(pa.Table.from_pylist([], schema=pa.schema(
            [("id", pa.string()), ("text", pa.string()), ("label", pa.int64())])), path)
    else:
        path.write_text("id,text,label\n")
    with pytest.raises(SourceError, match=rf"a\.{suffix}.* holds no rows .*commits none"):
        raycache.fill(text_fill(path, tmp_path / "store", model))
    assert raycache.ls(str(tmp_path / "store")) == []


def test_a_key_column_of_lists_is_refused_before_any_work(tmp_path):
    (tmp_path / "src").mkdir()
    table = separable(n=20)
    pq.write_table(table.set_column(0, "id", pa.array([[i] for i in range(20)])),
                   tmp_path / "src" / "a.parquet")
    with pytest.raises(ConfigError, match=r"source.key column 'id' is of type list<.*a\.parquet'"
                                          r"; a key is one value per row"):
        raycache.fill(toy_fill(str(tmp_path / "src"), str(tmp_path / "store"), in_process=True))
    assert not list((tmp_path / "store").rglob("*.parquet"))


def test_a_parquet_file_with_corrupt_pages_is_named(tmp_path):
    (tmp_path / "src").mkdir()
    path = tmp_path / "src" / "a.parquet"
    pq.write_table(separable(n=100), path, compression="snappy")
    data = bytearray(path.read_bytes())
    for i in range(100, 600):  # the first pages; the footer stays readable
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))
    with pytest.raises(SourceError, match=r"a\.parquet' cannot be read as parquet \(OSError"):
        raycache.fill(toy_fill(str(tmp_path / "src"), str(tmp_path / "store"), in_process=True))
    assert not committed(tmp_path / "store")


def test_an_unreachable_s3_source_is_named(tmp_path):
    cfg = toy_fill("s3://rc-nowhere/data/", str(tmp_path / "store"), in_process=True)
    cfg["source"]["options"] = {"client_kwargs": {"endpoint_url": "http://127.0.0.1:9"},
                                "config_kwargs": {"retries": {"max_attempts": 1}},
                                "key": "testing", "secret": "testing"}
    with pytest.raises(StoreUnavailable, match=r"'s3://rc-nowhere/data/' could not be read: "
                                               r".*EndpointConnectionError.*source\.options"):
        raycache.fill(cfg)  # refused connections: the service, named, with the likely fix


def test_a_column_named_like_raycaches_own_is_refused(tmp_path):
    (tmp_path / "src").mkdir()
    table = separable(n=20)
    pq.write_table(table.append_column("__row", pa.array(range(20))),
                   tmp_path / "src" / "a.parquet")
    cfg = toy_fill(str(tmp_path / "src"), str(tmp_path / "store"), in_process=True)
    cfg["source"]["labels"] = ["label", "__row"]
    with pytest.raises(ConfigError, match=r"'__row'.*names starting with '__' are raycache's own"):
        raycache.fill(cfg)


def test_a_label_type_that_changes_past_the_first_block_is_named(tmp_path):
    """The plan reads a JSONL file's first block (1 MiB) for its types; a label that turns
    float further down makes that file's shards differ from the others': named at the key scan,
    nothing committed. (Where the other file's label is float too, the files agree: the plan
    lets an integer and a float type of inferred files pass.)"""
    (tmp_path / "src").mkdir()
    rows = separable(n=7000).to_pylist()
    rows[-1]["label"] = 1.5
    (tmp_path / "src" / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[1:]))
    assert (tmp_path / "src" / "b.jsonl").stat().st_size > 2**20
    cfg = toy_fill(str(tmp_path / "src"), str(tmp_path / "store"), in_process=True,
                   rows_per_shard=1000)
    (tmp_path / "src" / "a.jsonl").write_text(json.dumps({**rows[0], "label": 0.5}) + "\n")
    assert raycache.fill(cfg).cache.manifest.rows == 7000  # double in both files, read whole

    (tmp_path / "src" / "a.jsonl").write_text(json.dumps(rows[0]) + "\n")
    with pytest.raises(SourceError, match=r"'label' was read as int64 from '.*a\.jsonl' but as "
                                          r"double from '.*b\.jsonl'.*no manifest was written"):
        raycache.fill(cfg)
    assert len(committed(tmp_path / "store")) == 1


def test_a_label_of_nulls_only_in_the_first_file_takes_the_other_files_type(tmp_path):
    """JSONL gives a column of nulls only the null type: the label's type and counts come
    from the files that hold values, not from the first file."""
    (tmp_path / "src").mkdir()
    rows = separable(n=40).to_pylist()
    (tmp_path / "src" / "a.jsonl").write_text(
        "".join(json.dumps({**r, "label": None}) + "\n" for r in rows[:20]))
    (tmp_path / "src" / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[20:]))
    cache = raycache.fill(toy_fill(str(tmp_path / "src"), str(tmp_path / "store"),
                                   in_process=True)).cache
    m = cache.manifest
    assert m.label_types["label"] == "int64"
    assert m.label_stats["label"]["nulls"] == 20 and m.label_stats["label"]["max"] == 2

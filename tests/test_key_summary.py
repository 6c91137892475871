"""The writers' key summaries (raycache._fill.summary) and the commit's scan that merges them
(raycache._fill.keys): the same duplicates, errors and label counts as reading every shard's
keys again, with no Ray."""

import json
import time
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from raycache import RaycacheError, SourceError
from raycache._cache.records import ShardRecord
from raycache._cache.store import Store
from raycache._fill import keys, summary
from raycache._fill.shards import STARTED, write_stage
from raycache._fill.summary import KeySummary, key_hashes, summarize


def test_equal_keys_hash_equal_in_every_form_and_distinct_ones_apart():
    words = [f"key {i}" * (i % 12) for i in range(3_000)]  # 0 to 99 bytes: both hash paths
    plain = key_hashes(pa.array(words))
    assert np.array_equal(plain, key_hashes(pa.array(words, pa.large_string())))
    assert np.array_equal(plain, key_hashes(pa.array(words).dictionary_encode()))
    assert np.array_equal(plain, key_hashes(pa.chunked_array([words[:7], words[7:]])))
    assert np.array_equal(plain[5:9], key_hashes(pa.array(words).slice(5, 4)))
    short = [w.encode() for w in words[:50] if len(w) <= summary.WIDEST]  # bytes as text
    assert np.array_equal(key_hashes(pa.array([w.decode() for w in short])),
                          key_hashes(pa.array(short)))
    assert len(np.unique(plain)) == len(set(words))
    # a value hashes alike beside short values only and beside long ones
    assert key_hashes(pa.array(["ab", "x" * 70]))[0] == key_hashes(pa.array(["ab"]))[0]
    assert key_hashes(pa.array(["ab", "ab\x00"])).tolist()[0] != \
        key_hashes(pa.array(["ab\x00"]))[0]
    assert key_hashes(pa.array([3, None, 7], pa.int32())).tolist() == [3, 0, 7]
    floats = key_hashes(pa.array([1.5, 2.5, 1.5]))
    assert floats[0] == floats[2] != floats[1]


def test_a_summary_survives_its_bytes():
    table = pa.table({"id": ["a", None, "c"], "label": [1, None, 1], "name": ["x", "y", "x"]})
    s = summarize(table, "id", ["label", "name"], "shards/a.parquet", "00ff")
    back = KeySummary.from_bytes(s.to_bytes())
    assert (back.path, back.sha256, back.nulls) == ("shards/a.parquet", "00ff", [1])
    assert back.types == {"id": "string", "label": "int64", "name": "string"}
    assert back.counts == {"label": {1: 2, None: 1}, "name": {"x": 2, "y": 1}}
    assert np.array_equal(back.hashes, s.hashes)
    with pytest.raises(ValueError, match="not a key summary"):
        KeySummary.from_bytes(b"nonsense")


def shards(tmp_path, ids: list, labels: list, rows: int = 4
           ) -> tuple[Store, str, list[ShardRecord], dict[str, KeySummary]]:
    """`ids` written by the fill's writer as shards of `rows` rows: (store, cache folder,
    records, the summaries it returned)."""
    store = Store(str(tmp_path / "store"))
    n = len(ids)
    table = pa.table({"__block": ["a.parquet"] * n, "__row": np.arange(n),
                      "__source": ["a.parquet"] * n, "__source_rows": [n] * n,
                      STARTED: [time.time()] * n, "id": ids, "label": labels})
    folder = store.path("c")  # a cache's folder inside the store, as a fill names it
    out = write_stage(table, store, folder, "fp", rows, key="id", labels=["label"])
    records = [ShardRecord.from_json(json.loads(t))
               for t in out.column("record").to_pylist()]
    found = {r.path: KeySummary.from_bytes(b)
             for r, b in zip(records, out.column("keys").to_pylist(), strict=True)}
    return store, folder, records, found


def scanned(store, folder, records, dup, summaries):
    out, stats = keys.scan(store, folder, records, "id", dup, ["label"], "toy",
                           summaries=summaries, raw=True)
    kept = [k for r in sorted(out, key=ShardRecord.order)
            for k in keys.read_keys(store, f"{folder}/{r.path}", 0, "id", []).column("id")
            .to_pylist()]
    return kept, stats


@pytest.mark.parametrize("dup", ["first", "last"])
@pytest.mark.parametrize("how", ["given", "stored", "none", "colliding"])
def test_merged_summaries_keep_the_rows_and_counts_that_reading_keeps(tmp_path, monkeypatch,
                                                                      dup, how):
    ids = ["a", "b", "c", "d", "e", "b", "g", "h", "b", "j", "e", "k", "l", "m", "n"]
    labels = [0, 1, 1, 2, 0, 1, 2, 2, 1, 0, 0, 1, 1, 1, 1]
    store, folder, records, given = shards(tmp_path, ids, labels)
    want = scanned(*shards(tmp_path / "read", ids, labels)[:3], dup, None)
    assert want[0] == (["a", "b", "c", "d", "e", "g", "h", "j", "k", "l", "m", "n"]
                       if dup == "first" else
                       ["a", "c", "d", "g", "h", "b", "j", "e", "k", "l", "m", "n"])
    assert want[1] == {"label": Counter({0: 3, 1: 6, 2: 3})}
    if how == "colliding":  # every key one hash: the keys are compared by value
        monkeypatch.setattr(summary, "key_hashes", lambda c: np.zeros(len(c), np.uint64))
        given = {}
    if how == "none":  # no summary given nor stored: each shard's keys read
        for r in records:
            store.rm(summary.summary_path(folder, r.path))
    reads = []
    monkeypatch.setattr(keys, "read_keys", lambda *a: reads.append(a[2]) or read(*a))
    got = scanned(store, folder, records, dup, given if how == "given" else {})
    assert got == want
    if how in ("given", "stored"):  # only the shards that hold a repeated key were read
        assert sorted(set(reads)) == [0, 1, 2]


read = keys.read_keys


def test_merged_summaries_raise_what_reading_raises(tmp_path):
    ids = ["a", "b", "c", "d", "b", "x", None, "y", None]
    store, folder, records, given = shards(tmp_path, ids, [0] * 9)
    with pytest.raises(SourceError, match=r"2 row\(s\) have no key.*at row 6"):
        keys.scan(store, folder, records, "id", "error", ["label"], "toy", summaries=given)
    store, folder, records, given = shards(tmp_path / "d", ["a", "b", "c", "d", "b"], [0] * 5)
    with pytest.raises(RaycacheError, match=r"1 key\(s\) of column 'id'.*\['b'\]"):
        keys.scan(store, folder, records, "id", "error", ["label"], "toy", summaries=given)
    given[records[1].path].types["label"] = "string"
    with pytest.raises(SourceError, match="'label' was read as int64 from .* but as string"):
        keys.scan(store, folder, records, "id", "error", ["label"], "toy", summaries=given)

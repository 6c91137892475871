"""Nulls never become numbers: a null input is never hashed like "" nor reused, it fails the
fill naming its key, file and row (or, with on_bad_rows: skip, is a skipped row with its
reason); null labels and class ids no row holds are reported by the fill (summary and
manifest) and refused or named by training, with keys and the fix."""

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from toy_encoders import WORDS, tiny_text_model

import raycache
from raycache import BadInput, ConfigError
from raycache._fill.reuse import Lookup, input_hashes
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> str:
    return tiny_text_model(str(tmp_path_factory.mktemp("model")))


def text_fill(source: Path, store: Path, model: str, name: str, **over) -> dict:
    return {"name": name, "source": {"path": str(source), "labels": ["label"]},
            "encoders": [{"name": "t", "kind": "hf-text", "input": "text", "path": model}],
            "store": {"uri": str(store)}, "rows_per_shard": 100, "progress": False,
            "in_process": True, **over}


def write(folder: Path, texts: list, labels: list | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    texts = [t if t != "words" else " ".join(rng.choice(WORDS, 4)) for t in texts]
    pq.write_table(pa.table({"id": [f"t{i:03d}" for i in range(len(texts))],
                             "text": pa.array(texts, pa.string()),
                             "label": labels or [i % 2 for i in range(len(texts))]}),
                   folder / "a.parquet")
    return folder


def test_a_null_hashes_to_null_never_to_the_hash_of_the_empty_text():
    hashes = input_hashes(pa.array(["", None, "a", None]))
    assert hashes.type == pa.binary(32) and hashes.null_count == 2
    assert hashes[1].as_py() is None and hashes[0].as_py() is not None
    assert hashes[2] == input_hashes(pa.array(["a"]))[0]
    stored = Lookup([], dim=4)
    stored.index(np.frombuffer(input_hashes(pa.array([""])).buffers()[1], "S32", 1),
                 np.zeros(1, np.int32), np.zeros(1, np.int32))
    pos, _, _ = stored.find(hashes)
    assert pos.tolist() == [0]  # the empty text is found; the nulls are not


def test_a_null_text_is_never_given_the_embedding_of_an_empty_text(tmp_path, model):
    store = tmp_path / "store"
    raycache.fill(text_fill(write(tmp_path / "empty", ["", "words", "words"]), store, model,
                            "first"))
    source = write(tmp_path / "nulls", ["words", None, "words", None, None])
    with pytest.raises(BadInput) as err:
        raycache.fill(text_fill(source, store, model, "second"))
    message = str(err.value)
    assert "input column 'text' is null in 3 of 5 rows" in message and "2 more" in message
    assert "id='t001'" in message and "row 1 of" in message and "a.parquet" in message
    assert "on_bad_rows: skip" in message
    assert len(list(store.rglob("manifest.json"))) == 1  # nothing committed for the second


def test_a_null_text_is_named_with_reuse_off(tmp_path, model):
    source = write(tmp_path / "nulls", ["words", "words", None])
    with pytest.raises(BadInput, match=r"null in 1 of 3 rows.*id='t002', row 2 of .*a\.parquet"):
        raycache.fill(text_fill(source, tmp_path / "store", model, "x", reuse=False))


def test_null_texts_are_skipped_rows_with_their_reason(tmp_path, model):
    store = tmp_path / "store"
    raycache.fill(text_fill(write(tmp_path / "empty", ["", "words"]), store, model, "first"))
    source = write(tmp_path / "nulls", ["words", None, "words", "", None])
    result = raycache.fill(text_fill(source, store, model, "second", on_bad_rows="skip"))
    m = result.cache.manifest
    assert m.rows == 3 and sorted(s.key for s in m.skipped) == ["t001", "t004"]
    assert all("input column 'text' is null" in s.reason for s in m.skipped)
    assert "SKIPPED 2 row(s)" in result.summary()
    keys = result.cache.read_table(["id"]).column("id").to_pylist()
    assert sorted(keys) == ["t000", "t002", "t003"]


def labelled(tmp_path: Path, labels: list) -> raycache.FillResult:
    table = separable(n=60).set_column(2, "label", pa.array(labels, pa.int64()))
    (tmp_path / "src").mkdir()
    pq.write_table(table, tmp_path / "src" / "a.parquet")
    return raycache.fill(toy_fill(str(tmp_path / "src"), str(tmp_path / "store"),
                                  in_process=True))


def train(tmp_path: Path) -> raycache.TrainResult:
    return raycache.train({"cache": "toy", "store": {"uri": str(tmp_path / "store")},
                           "label": "label", "epochs": 1, "num_workers": 0, "progress": False})


def test_null_labels_are_reported_by_the_fill_and_refused_by_training_with_keys(tmp_path):
    labels = [i % 3 for i in range(60)]
    labels[7] = labels[41] = None
    result = labelled(tmp_path, labels)
    assert "LABELS: label 'label' is null in 2 row(s)" in result.summary()
    manifest = json.loads(next((tmp_path / "store").rglob("manifest.json")).read_text())
    assert any("null in 2 row(s)" in p for p in manifest["extra"]["label_problems"])
    with pytest.raises(ConfigError) as err:
        train(tmp_path)
    message = str(err.value)
    assert "label column 'label' is null in 2 row(s)" in message
    assert "row-00007" in message and "row-00041" in message
    assert "Fill those labels (or drop the rows) in the source" in message


def test_integer_labels_from_1_report_the_empty_class_0(tmp_path):
    result = labelled(tmp_path, [1 + i % 3 for i in range(60)])
    assert "holds no row of class id(s) 0 (ids run 0..3)" in result.summary()
    assert result.cache.manifest.label_problems
    with pytest.warns(UserWarning, match=r"no row of class id\(s\) \[0\].*Map the labels to "
                                         r"0\.\.K-1"):
        train(tmp_path)


def test_labels_0_to_k_minus_1_report_nothing(tmp_path):
    result = labelled(tmp_path, [i % 3 for i in range(60)])
    assert "LABELS" not in result.summary() and not result.cache.manifest.label_problems

"""Named labels: string and categorical label columns fill with their vocabulary in the
manifest, train as classes in that order, and a head predicts their names (ids and
probabilities beside them), in the SDK and in `raycache predict`."""

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raycache
from raycache._cli import main
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(240)

NAMES = ["class-0", "class-1", "class-2"]


@pytest.fixture(scope="module")
def named(tmp_path_factory):
    """A toy cache whose `name` label holds strings, and a classifier trained on it."""
    root = tmp_path_factory.mktemp("named")
    (root / "source").mkdir()
    pq.write_table(separable(n=300), root / "source" / "a.parquet")
    store = str(root / "store")
    filled = raycache.fill(toy_fill(str(root / "source"), store, in_process=True))
    run = raycache.train({"cache": "toy", "store": {"uri": store}, "label": "name",
                          "num_workers": 0, "progress": False, "epochs": 3, "lr": 0.05})
    return {"root": root, "store": store, "cache": filled.cache, "run": run}


def test_the_manifest_records_each_named_label_vocabulary_in_sorted_order(named):
    stats = named["cache"].manifest.label_stats["name"]
    assert stats["classes"] == NAMES and stats["nulls"] == 0
    names = separable(n=300).column("name").to_pylist()
    assert stats["counts"] == [names.count(n) for n in NAMES]
    assert named["cache"].manifest.label_stats["label"]["counts"] == stats["counts"]


def test_a_head_trained_on_names_predicts_names_ids_and_probabilities(named):
    run = named["run"]
    assert run.spec.head.class_names == tuple(NAMES) and run.spec.head.num_classes == 3
    assert run.metrics["val_acc"] > 0.9
    head = raycache.load_head(run.checkpoint)
    saved = json.loads((Path(run.checkpoint) / "head.json").read_text())
    assert head.classes == NAMES and saved["head"]["class_names"] == NAMES
    rows = separable(n=300).slice(0, 60)
    x = rows.column("features").to_pylist()
    predicted = head.predict(x)
    truth = rows.column("name").to_pylist()
    assert set(predicted) <= set(NAMES)
    assert np.mean([p == t for p, t in zip(predicted, truth, strict=True)]) > 0.9
    probs = head.predict_proba(x)
    assert probs.shape == (60, 3) and np.allclose(probs.sum(1), 1, atol=1e-5)
    assert [NAMES[i] for i in probs.argmax(1)] == list(predicted)


def test_raycache_predict_writes_the_name_and_its_id(named, tmp_path):
    rows = separable(n=300).slice(0, 50).drop_columns(["label", "name"])
    (tmp_path / "in").mkdir()
    pq.write_table(rows, tmp_path / "in" / "rows.parquet")
    out = tmp_path / "pred.parquet"
    assert main(["predict", "--checkpoint", named["run"].checkpoint, "--input",
                 str(tmp_path / "in" / "rows.parquet"), "--output", str(out),
                 "--in-process", "true", "--no-progress"]) == 0
    table = pq.read_table(out)
    assert table.schema.field("prediction").type == pa.string()
    ids = table.column("prediction_id").to_pylist()
    assert table.column("prediction").to_pylist() == [NAMES[i] for i in ids]
    head = raycache.load_head(named["run"].checkpoint)
    assert table.column("prediction").to_pylist() == list(
        head.predict(rows.column("features").to_pylist()))


def test_categorical_labels_from_a_dataframe_stream_and_train(tmp_path):
    df = separable(n=300).to_pandas()
    df["name"] = df["name"].astype("category")
    cfg = toy_fill("unused", str(tmp_path / "store"), in_process=True)
    cfg["source"] = {"data": df, "key": "id", "labels": ["name"]}
    cache = raycache.fill(cfg).cache
    assert cache.manifest.label_types["name"].startswith("dictionary<values=")
    assert cache.manifest.label_stats["name"]["classes"] == NAMES
    run = raycache.train({"cache": "toy", "store": {"uri": str(tmp_path / "store")},
                          "num_workers": 0, "progress": False, "epochs": 3, "lr": 0.05,
                          "placement": "stream"})
    assert run.spec.head.class_names == tuple(NAMES) and run.metrics["val_acc"] > 0.9


def test_similarity_groups_take_names_too(named):
    run = raycache.train({"cache": "toy", "store": {"uri": named["store"]}, "label": "name",
                          "objective": "groups", "embedding_dim": 4, "normalize": True,
                          "groups": {"loss": "infonce"}, "num_workers": 0, "progress": False,
                          "epochs": 2, "lr": 0.05, "metrics_k": [1]})
    assert run.spec.head.class_names == tuple(NAMES)
    assert run.metrics["val_precision_at_1"] > 0.9

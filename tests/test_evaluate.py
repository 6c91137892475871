"""`raycache.evaluate` and `raycache evaluate`: a head scored on a labelled file, a DataFrame or
its run's own validation keys: accuracy, macro-F1, per-class scores by class name and the
confusion matrix (table, JSON, PNG), checked against the head's own predictions."""

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raycache
from raycache._cli import main
from raycache._errors import RaycacheError
from raycache._scripting import ERROR
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> raycache.TrainResult:
    """A linear head on the toy cache's named label (class-0, class-1, class-2)."""
    root = tmp_path_factory.mktemp("evaluate")
    (root / "src").mkdir()
    pq.write_table(separable(n=300), root / "src" / "a.parquet")
    raycache.fill(toy_fill(str(root / "src"), str(root / "store"), in_process=True))
    return raycache.train({"cache": "toy", "store": {"uri": str(root / "store")},
                           "label": "name", "head": "linear", "num_workers": 0,
                           "progress": False})


def labelled(tmp_path: Path, n: int = 120, seed: int = 7) -> tuple[Path, pa.Table]:
    table = separable(n=300).slice(300 - n)  # the training set's classes, noisier below
    noisy = np.stack(table.column("features").to_numpy(zero_copy_only=False)) + \
        np.random.default_rng(seed).normal(0, 1.5, (n, 8)).astype(np.float32)
    table = table.set_column(1, "features", pa.FixedSizeListArray.from_arrays(
        pa.array(noisy.astype(np.float32).reshape(-1)), 8))
    path = tmp_path / "test.parquet"
    pq.write_table(table, path)
    return path, table


def expected(run, table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    head = run.load_head()
    pred = head.predict({"features": table.column("features").to_pylist()})
    truth = np.asarray(table.column("name").to_pylist(), dtype=object)
    return truth, pred


def test_a_labelled_file_is_scored_as_the_heads_own_predictions_say(run, tmp_path):
    path, table = labelled(tmp_path)
    ev = raycache.evaluate(run.checkpoint, str(path))
    truth, pred = expected(run, table)
    assert ev.rows == 120 and ev.label == "name"
    assert ev.classes == ["class-0", "class-1", "class-2"]
    assert ev.accuracy == pytest.approx(float(np.mean(truth == pred)))
    assert 0.5 < ev.accuracy < 1.0  # the noise makes mistakes: the matrix is not diagonal
    for i, name in enumerate(ev.classes):
        for j, other in enumerate(ev.classes):
            assert ev.confusion[i, j] == np.sum((truth == name) & (pred == other))
        tp = np.sum((truth == name) & (pred == name))
        assert ev.per_class[name]["support"] == np.sum(truth == name)
        assert ev.per_class[name]["recall"] == pytest.approx(tp / np.sum(truth == name))
        assert ev.per_class[name]["precision"] == pytest.approx(tp / max(np.sum(pred == name), 1))
    f1 = [ev.per_class[c]["f1"] for c in ev.classes]
    assert ev.macro_f1 == pytest.approx(np.mean(f1))
    assert "class-1" in ev.table() and "true \\ predicted" in ev.confusion_table()


def test_a_dataframe_scores_the_same_as_its_file(run, tmp_path):
    path, table = labelled(tmp_path)
    from_file = raycache.evaluate(run.checkpoint, str(path))
    from_frame = raycache.evaluate(run.checkpoint, table.to_pandas())
    assert from_frame.to_dict() | {"data": ""} == from_file.to_dict() | {"data": ""}


def test_the_runs_own_validation_keys(run):
    ev = raycache.evaluate(run)
    df = run.cache.to_pandas()
    held = df[run.held_out(df["id"])]
    assert ev.rows == len(held) > 0 and "validation keys" in ev.data
    pred = run.load_head().predict_embeddings(np.stack(held["proj"]))
    assert ev.accuracy == pytest.approx(float(np.mean(pred == held["name"].to_numpy())))
    with pytest.raises(RaycacheError, match="needs the TrainResult"):
        raycache.evaluate(run.checkpoint)


def test_the_command_line_prints_the_tables_and_writes_json_and_png(run, tmp_path, capsys):
    path, _ = labelled(tmp_path)
    out = tmp_path / "eval"
    assert main(["evaluate", "--checkpoint", run.checkpoint, "--input", str(path),
                 "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "accuracy" in printed and "macro-F1" in printed and "precision" in printed
    assert "true \\ predicted" in printed
    saved = json.loads((out / "evaluation.json").read_text())
    assert saved["rows"] == 120 and len(saved["confusion"]) == 3
    assert sum(map(sum, saved["confusion"])) == 120
    assert (out / "confusion.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["evaluate", "--checkpoint", run.checkpoint, "--input", str(path),
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == saved["accuracy"]


def test_bad_labels_are_named(run, tmp_path):
    path, table = labelled(tmp_path)
    with pytest.raises(RaycacheError, match=r"no label column 'topic'.*label=\.\.\."):
        raycache.evaluate(run.checkpoint, str(path), label="topic")
    odd = table.set_column(3, "name", pa.array(["class-9"] + table.column("name").to_pylist()[1:]))
    with pytest.raises(RaycacheError, match=r"holds 1 value\(s\) the head does not know.*"
                                            r"class-9"):
        raycache.evaluate(run.checkpoint, odd)
    null = table.set_column(3, "name", pa.array([None] + table.column("name").to_pylist()[1:]))
    with pytest.raises(RaycacheError, match=r"'name' of a pyarrow Table is null in 1 row"):
        raycache.evaluate(run.checkpoint, null)
    assert main(["evaluate", "--checkpoint", run.checkpoint, "--input", str(path),
                 "--label", "topic"]) == ERROR

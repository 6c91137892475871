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
from raycache import RaycacheError
from raycache._cli import main
from raycache._cli.scripting import ERROR
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


def test_the_runs_own_validation_keys(run, tmp_path):
    ev = raycache.evaluate(run)
    df = run.cache.to_pandas()
    held = df[run.held_out(df["id"])]
    assert ev.rows == len(held) > 0 and "validation keys" in ev.data
    pred = run.load_head().predict_embeddings(np.stack(held["proj"]))
    assert ev.accuracy == pytest.approx(float(np.mean(pred == held["name"].to_numpy())))
    assert raycache.evaluate(run.checkpoint).to_dict() == ev.to_dict()  # its run folder's split
    import shutil

    copied = shutil.copytree(run.checkpoint, tmp_path / "copied")  # out of its run folder
    with pytest.raises(RaycacheError, match="not in a run folder of its cache"):
        raycache.evaluate(str(copied))


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


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_a_file_is_read_here_and_nothing_reads_it_after_a_refusal(run, tmp_path, monkeypatch,
                                                                  fmt):
    """pyarrow's readers given the open Python file read it on their own threads, and one of
    them dropped the scan's last reference to it while the interpreter finalised (taking the
    GIL then ends the thread: std::terminate, exit 134 instead of 3 after a refusal): the file
    is read here into Arrow's memory, and pyarrow parses that."""
    import threading

    import pyarrow.csv as pcsv

    from raycache._source.file import SourceFile
    from tests.test_schema_reads import Watched

    _, table = labelled(tmp_path)
    path = tmp_path / f"rows.{fmt}"
    if fmt == "parquet":
        pq.write_table(table, path)
    elif fmt == "csv":
        pcsv.write_csv(table.drop_columns(["features"]), path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in table.to_pylist()))
    log: list = []
    monkeypatch.setattr(SourceFile, "open", lambda self, options: Watched(path, log))
    with pytest.raises(RaycacheError, match="no label column 'topic'"):
        raycache.evaluate(run.checkpoint, str(path), label="topic")
    here = threading.get_ident()
    assert log and all(ident == here and not closed for ident, closed in log), log


@pytest.fixture(scope="module")
def int_run(run) -> raycache.TrainResult:
    """A linear head on the same cache's integer label (classes 0, 1, 2)."""
    return raycache.train({"cache": "toy", "store": {"uri": run.cache.store.uri},
                           "label": "label", "head": "linear", "num_workers": 0,
                           "progress": False})


def test_labels_of_another_type_than_an_integer_heads_are_refused_by_name(int_run, tmp_path):
    _, table = labelled(tmp_path)
    ids = table.column("label").to_pylist()
    assert raycache.evaluate(int_run.checkpoint, table).rows == 120  # its own type scores
    for kind, values in [("bool", [i == 1 for i in ids]), ("double", [float(i) for i in ids]),
                         ("string", [str(i) for i in ids])]:
        odd = table.set_column(2, "label", pa.array(values))
        with pytest.raises(RaycacheError, match=rf"label column 'label' of a pyarrow Table "
                                                rf"holds {kind} values; the head's classes are "
                                                r"the integer ids \[0, 1, 2\].*False -> 0"):
            raycache.evaluate(int_run.checkpoint, odd)


def test_no_rows_to_score_is_an_error_not_a_zero(run, tmp_path, capsys):
    empty = tmp_path / "empty.csv"
    empty.write_text("id,name\n")
    with pytest.raises(RaycacheError, match=r"empty\.csv' holds no rows to score"):
        raycache.evaluate(run.checkpoint, str(empty))
    _, table = labelled(tmp_path)  # the head's columns, no rows: scored accuracy 0.0 before
    with pytest.raises(RaycacheError, match="a DataFrame holds no rows to score"):
        raycache.evaluate(run.checkpoint, table.slice(0, 0).to_pandas())
    pq.write_table(table.slice(0, 0), tmp_path / "empty.parquet")
    assert main(["evaluate", "--checkpoint", run.checkpoint, "--input",
                 str(tmp_path / "empty.parquet")]) == ERROR
    assert "holds no rows to score" in capsys.readouterr().err


def test_an_output_that_is_a_file_or_an_earlier_evaluation_is_refused_first(run, tmp_path,
                                                                             capsys):
    path, _ = labelled(tmp_path)
    taken = tmp_path / "notes.txt"
    taken.write_text("mine")
    for output in (taken, taken / "eval"):
        assert main(["evaluate", "--checkpoint", run.checkpoint, "--input", str(path),
                     "--output", str(output)]) == ERROR
        err = capsys.readouterr().err
        assert f"{str(taken)!r} is a file, not a folder" in err and "Traceback" not in err
    assert taken.read_text() == "mine"
    out = tmp_path / "eval"
    first = raycache.evaluate(run.checkpoint, str(path), output=str(out))
    (out / "evaluation.json").write_text("{}")
    with pytest.raises(RaycacheError, match=r"already holds \['evaluation.json', "
                                            r"'confusion.txt', 'confusion.png'\].*--overwrite"):
        raycache.evaluate(run.checkpoint, str(path), output=str(out))
    assert (out / "evaluation.json").read_text() == "{}"
    assert main(["evaluate", "--checkpoint", run.checkpoint, "--input", str(path), "--output",
                 str(out), "--overwrite"]) == 0
    assert json.loads((out / "evaluation.json").read_text())["accuracy"] == first.accuracy

"""A user's first week (issue 53): `raycache runs` shows and sorts by the served epoch's
metrics and refuses a metric no run has; `raycache evaluate` scores a run's held-out rows and
writes them out; NaN labels named at fill time; export to an unwritable path is one line;
warnings point at the caller. In-process: no Ray."""

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import raycache
from raycache._cli import main
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """A toy cache and two runs whose histories are rewritten so that the served epoch (2)
    differs from the last (3): "early" serves val_acc 0.9 (last 0.5), "late" 0.8 (last 0.95)."""
    root = tmp_path_factory.mktemp("first-week")
    (root / "src").mkdir()
    pq.write_table(separable(n=200), root / "src" / "a.parquet")
    raycache.fill(toy_fill(str(root / "src"), str(root / "store"), in_process=True))
    for name, accs in (("early", (0.6, 0.9, 0.5)), ("late", (0.7, 0.8, 0.95))):
        run = raycache.train({"cache": "toy", "store": {"uri": str(root / "store")},
                              "head": "mlp", "epochs": 3, "num_workers": 0, "progress": False,
                              "run_name": name, "monitor": "val_loss"})
        folder = Path(run.run_dir)
        rows = [{**m, "val_acc": a, "val_f1": a - 0.1, "val_loss": 1 - a}
                for m, a in zip(run.history, accs, strict=True)]
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        head = Path(run.checkpoint) / "head.json"
        head.write_text(json.dumps({**json.loads(head.read_text()), "weights_epoch": 2}))
    return str(root / "store")


def test_runs_show_the_served_epochs_metrics_not_the_last(store, capsys):
    assert main(["runs", "toy", "--store", store]) == 0
    lines = capsys.readouterr().out.splitlines()[::2]
    early = next(line for line in lines if line.startswith("early"))
    assert "val_loss 0.1000 served at epoch 2" in early  # not the last epoch's 0.5000 first
    assert ", val_acc 0.9000, val_f1 0.8000" in early and "val_acc 0.5000" not in early
    assert "last epoch 3: 0.5000" in early
    [listed] = [r for r in json.loads(_out(capsys, "runs", "toy", "--store", store, "--json"))
                if r["name"] == "early"]
    assert listed["served"]["val_acc"] == 0.9 and listed["served_epoch"] == 2


def test_runs_metric_sorts_and_prints_by_it(store, capsys):
    assert main(["runs", "toy", "--store", store, "--metric", "val_acc"]) == 0
    lines = capsys.readouterr().out.splitlines()[::2]
    assert [line.split()[0] for line in lines] == ["early", "late"]  # 0.9 before 0.8 served
    assert "val_acc 0.9000 served at epoch 2" in lines[0]
    assert "val_acc 0.8000 served at epoch 2" in lines[1] and "last epoch 3: 0.9500" in lines[1]
    listed = json.loads(_out(capsys, "runs", "toy", "--store", store, "--json", "--metric",
                             "val_f1"))
    assert [(r["name"], r["metric"]) for r in listed] == [("early", "val_f1"), ("late", "val_f1")]
    assert listed[0]["served_metric"] == pytest.approx(0.8)


def test_runs_refuse_a_metric_no_run_has_naming_those_they_have(store, capsys):
    assert main(["runs", "toy", "--store", store, "--metric", "val_f1xx"]) == 3
    err = capsys.readouterr().err
    assert "--metric 'val_f1xx': no run recorded it" in err
    assert "val_acc" in err and "val_f1" in err and "val_loss" in err


def _out(capsys, *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_evaluate_without_input_scores_the_runs_held_out_rows_and_writes_them(
        store, tmp_path, capsys):
    import pyarrow.compute as pc

    run_folder = str(next(Path(store).glob("toy/*/runs/early")))
    held = tmp_path / "held.parquet"
    scored = json.loads(_out(capsys, "evaluate", "--checkpoint", run_folder, "--json",
                             "--held-out", str(held)))
    assert scored["data"].startswith("the validation keys of toy/")
    keys = pq.read_table(held)
    assert keys.num_rows == scored["rows"] > 0 and keys.column_names[0] == "id"
    source = pq.read_table(Path(store).parent / "src" / "a.parquet")
    rows = tmp_path / "rows.parquet"  # the source's rows of those keys, as the docs join them
    pq.write_table(source.filter(pc.is_in(source["id"], keys["id"])), rows)
    again = json.loads(_out(capsys, "evaluate", "--checkpoint", run_folder, "--input",
                            str(rows), "--json"))
    assert (again["rows"], again["accuracy"]) == (scored["rows"], scored["accuracy"])
    assert again["confusion"] == scored["confusion"]


def test_nan_float_labels_are_named_at_fill_time(tmp_path):
    import numpy as np
    import pyarrow as pa

    table = separable(n=40)
    score = np.linspace(0, 1, 40)
    score[[3, 30]] = np.nan
    (tmp_path / "src").mkdir()
    pq.write_table(table.append_column("score", pa.array(score)), tmp_path / "src" / "a.parquet")
    cfg = toy_fill(str(tmp_path / "src"), str(tmp_path / "store"), in_process=True)
    cfg["source"]["labels"] = ["label", "score"]
    done = raycache.fill(cfg)
    said = "label 'score' is NaN in 2 row(s), the first of key 'row-00003'"
    assert any(said in p for p in done.cache.manifest.label_problems)
    assert said in done.summary()


def test_a_training_warning_points_at_the_users_call(tmp_path):
    import pyarrow as pa
    import pyarrow.compute as pc

    table = separable(n=60)
    gappy = pc.if_else(pc.equal(table["label"], 1), 2, table["label"])  # ids 0 and 2: no 1
    (tmp_path / "src").mkdir()
    pq.write_table(table.set_column(2, "label", gappy.cast(pa.int64())),
                   tmp_path / "src" / "a.parquet")
    raycache.fill(toy_fill(str(tmp_path / "src"), str(tmp_path / "store"), in_process=True))
    with pytest.warns(UserWarning, match="holds no row of class id") as caught:
        raycache.train({"cache": "toy", "store": {"uri": str(tmp_path / "store")},
                        "label": "label", "num_workers": 0, "progress": False})
    [said] = [w for w in caught if "holds no row of class id" in str(w.message)]
    assert said.filename == __file__  # this line's call, not a line of raycache's source


@pytest.mark.parametrize("under", ["a-file", "missing-folder-of-a-file"])
def test_export_to_a_path_it_cannot_write_is_one_line_exit_3(store, tmp_path, capsys, under):
    (tmp_path / "a-file").write_text("not a folder")
    to = tmp_path / "a-file" / "rows.parquet" if under == "a-file" else \
        tmp_path / "a-file" / "deeper" / "rows.parquet"
    assert main(["export", "toy", "--store", store, "--to", str(to)]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"export target {str(to)!r} cannot be written" in err[0], err


def test_the_demo_run_again_with_nothing_changed_reuses_its_run(tmp_path):
    from raycache._cli.demo_run import train_config
    from raycache._train.folder.record import list_runs

    (tmp_path / "src").mkdir()
    pq.write_table(separable(n=60), tmp_path / "src" / "a.parquet")
    cfg = toy_fill(str(tmp_path / "src"), str(tmp_path / "store"), in_process=True,
                   name="stdlib-docs")  # the demo's cache name, of toy rows
    raycache.fill(cfg)
    first = raycache.train(train_config(str(tmp_path / "store"), workers=0), progress=False)
    again = raycache.train(train_config(str(tmp_path / "store"), workers=0), progress=False)
    assert again.run_dir == first.run_dir and again.finished_before
    assert len(list_runs(raycache.open_cache("stdlib-docs", str(tmp_path / "store")))) == 1

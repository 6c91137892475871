"""Every summary says what its call did: a finished run returned again, a fill's timings that add
up, a fill that reused every row, a repair; a sweep's epoch lines and summary name its leader."""

import importlib
import json
import os
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import raycache
from raycache._cli import main
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """A toy cache (600 rows, 3 separable classes) filled in this process, no Ray."""
    root = tmp_path_factory.mktemp("summaries")
    (root / "source").mkdir()
    pq.write_table(separable(), root / "source" / "a.parquet")
    raycache.fill(toy_fill(str(root / "source"), str(root / "store"), in_process=True))
    return str(root / "store")


def train_cfg(store: str, **over) -> dict:
    return {"cache": "toy", "store": {"uri": store}, "epochs": 2, "lr": 0.05, "batch_size": 32,
            "num_workers": 0, "progress": False, **over}


def test_a_finished_run_run_again_says_nothing_was_trained_and_how_to_train_anew(
        store, tmp_path, capsys):
    first = raycache.train(train_cfg(store, run_name="once"))
    assert not first.finished_before and "trained epochs 1-2 of 2" in first.summary()
    assert "in-process (resources.num_workers: 0)" in first.summary()
    again = raycache.train(train_cfg(store, run_name="once"))
    record = json.loads((Path(first.spec.run_dir) / "run.json").read_text())
    assert again.finished_before == record["updated"]
    text = again.summary()
    assert f"run once had already finished ({record['updated']}, in {first.run_dir})" in text
    assert "nothing was trained now" in text and "resume: false" in text
    assert "--set resume=false" in text and "worker" not in text  # no workers ran this time
    # the command line prints no epoch of the old run, and the same summary
    config = tmp_path / "train.yaml"
    config.write_text(json.dumps(train_cfg(store, run_name="once")))
    assert main(["train", "--config", str(config), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert not re.search(r"^epoch", out, re.M) and "nothing was trained now" in out
    # what the summary suggests trains a new run beside it
    fresh = raycache.train(train_cfg(store, run_name=None, resume=False))
    assert not fresh.finished_before and fresh.spec.run_name != "once"


def test_a_single_heads_best_and_its_monitored_metric_are_reported(store, capfd):
    run = raycache.train(train_cfg(store, epochs=3, monitor="val_f1", run_name="f1",
                                   progress=True))
    f1 = [m["val_f1"] for m in run.history]
    best_epoch = f1.index(max(f1)) + 1
    assert run.best == {"val_f1": max(f1), "epoch": best_epoch}
    record = json.loads((Path(run.spec.run_dir) / "run.json").read_text())
    assert record["best"] == run.best and record["checkpoint"] == run.checkpoint
    assert f"best val_f1 {max(f1):.4f} at epoch {best_epoch} (monitored" in run.summary()
    lines = [x for x in capfd.readouterr().out.splitlines() if x.startswith("epoch ")]
    assert len(lines) == 3 and all("val_f1 " in x for x in lines), lines


def test_a_sweep_names_its_leader_and_the_heads_still_training(store, capfd):
    run = raycache.train(train_cfg(store, run_name="sweep", epochs=4, head="mlp",
                                   sweep={"lr": [0.05, 0.0001], "hidden": [[8], [16]]},
                                   early_stopping=True, patience=1, monitor="val_f1",
                                   progress=True))
    settings = [" ".join(f"{k}={v}" for k, v in row["settings"].items()) for row in run.sweep]
    lines = [x for x in capfd.readouterr().out.splitlines() if x.startswith("epoch ")]
    assert len(lines) == len(run.history)
    for line, m in zip(lines, run.history, strict=True):
        assert f"leader #{m['member']} {settings[m['member']]}: val_f1 " in line, line
        assert f"{m['active']} of 4 heads training" in line, line
    best = run.best
    assert best["selected"] and run.best == next(r for r in run.sweep if r["selected"])
    text = run.summary()
    assert (f"selected member #{best['member']} {settings[best['member']]}: val_f1 "
            f"{best['val_f1']:.4f} at epoch {best['epoch']}") in text
    assert text.count("val_f1") == 1 and "val_acc" not in text and "val_loss" not in text


def test_fill_timings_add_up_and_a_fully_reused_fill_gives_no_rate(store, tmp_path):
    source = Path(store).parent / "source"
    result = raycache.fill(toy_fill(str(source), str(tmp_path / "store"), in_process=True))
    assert 0 <= result.startup_seconds <= result.first_shard_seconds <= result.seconds
    numbers = re.search(r", ([\d.]+) s = ([\d.]+) s start-up \(to the first encoder call\) "
                        r"\+ ([\d.]+) s encoding and writing shards \([\d.]+ rows/s\) "
                        r"\+ ([\d.]+) s checking and committing$", result.summary())
    assert numbers, result.summary()
    total, *parts = (float(x) for x in numbers.groups())
    assert sum(parts) == pytest.approx(total, abs=0.15)
    # the same rows under another name: every embedding taken from the first cache
    reused = raycache.fill(toy_fill(str(source), str(tmp_path / "store"), in_process=True,
                                    name="toy-again"))
    assert (reused.encoded_rows, reused.reused_rows) == (0, 600)
    text = reused.summary()
    assert "rows/s" not in text and "nothing encoded (every row reused or resumed)" in text


def test_a_repair_calls_itself_a_repair(tmp_path, capsys):
    (tmp_path / "src").mkdir()
    pq.write_table(separable(n=400), tmp_path / "src" / "a.parquet")
    store = str(tmp_path / "store")
    cache = raycache.fill(toy_fill(str(tmp_path / "src"), store, rows_per_shard=100,
                                   in_process=True)).cache
    healthy = raycache.repair("toy", store, in_process=True)
    assert healthy.summary().startswith(f"repair toy/{cache.fingerprint[:12]}: every shard is "
                                        "good") and "nothing to repair" in healthy.summary()
    os.remove(cache.shard_paths()[1])
    assert main(["repair", "toy", "--store", store, "--no-progress"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith(f"repair toy/{cache.fingerprint[:12]}: re-encoded the bad shards, "
                          "400 rows (100 encoded, 300 kept from good shards)"), out
    assert "miss" not in out and "fill " not in out


def test_a_resumed_run_says_which_epochs_this_call_trained(store):
    import shutil

    first = raycache.train(train_cfg(store, epochs=3, run_name="resumed",
                                     checkpoints={"every": 1}))
    folder = Path(first.spec.run_dir)
    record = json.loads((folder / "run.json").read_text())
    (folder / "run.json").write_text(json.dumps({**record, "status": "failed"}))
    shutil.rmtree(folder / "checkpoint_000003")  # as if it died after epoch 2's checkpoint
    assert (folder / "checkpoint_000002" / "state.pt").is_file()
    again = raycache.train(train_cfg(store, epochs=3, run_name="resumed",
                                     checkpoints={"every": 1}))
    assert again.first_epoch == 2 and not again.finished_before
    assert "trained epoch 3 of 3 (resumed from epoch 2)" in again.summary()


def test_a_watched_console_keeps_one_progress_line_and_a_log_one_per_epoch(monkeypatch, capsys):
    console = importlib.import_module("raycache._train.console")
    lines = ["epoch 1/3  train_loss 1.2000", "epoch 2/3  loss 0.9", "epoch 3/3  loss 0.5"]
    monkeypatch.setattr(console, "live", lambda: True)  # a terminal or a notebook
    for i, line in enumerate(lines):
        console.say_progress(line, final=i == len(lines) - 1)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.endswith("\n") and out.count("\r") == 3
    assert out.split("\r")[2] == "epoch 2/3  loss 0.9".ljust(len(lines[0]))  # covers the longer
    monkeypatch.setattr(console, "live", lambda: False)  # a log file: a line each
    for i, line in enumerate(lines):
        console.say_progress(line, final=i == len(lines) - 1)
    assert capsys.readouterr().out.splitlines() == lines

"""Live tracking: metrics.jsonl and TensorBoard events written as each epoch ends (not only when
the run does), the callback hook (`TrainConfig.tracking`, Ray Train's `after_report` shape), and
the MLflow (a file store) and Weights & Biases (offline) integrations, each writing its run."""

import glob
import json
import os
from pathlib import Path
from typing import Any

import pytest

import raycache
from raycache import ConfigError
from raycache._train.driver.checks import load_config
from raycache._train.tracking import TrainCallback
from tests.conftest import toy_fill

pytestmark = [pytest.mark.timeout(300)]

SEEN: list[dict[str, Any]] = []
"""What Recorder saw at each epoch's end (this process: the run trains in it)."""


class Recorder(TrainCallback):
    """Reads the run folder as each epoch ends, while the run still trains."""

    def __init__(self, tag: str = "") -> None:
        self.tag = tag

    def before_run(self, run_context):
        SEEN.append({"before": run_context.run_name, "config": run_context.config})

    def after_report(self, run_context, metrics, checkpoint):
        folder = Path(run_context.run_dir)
        board = sorted(folder.glob("tensorboard/*"))
        SEEN.append({"epoch": metrics[0]["epoch"], "checkpoint": checkpoint, "tag": self.tag,
                     "lines": (folder / "metrics.jsonl").read_text().splitlines(),
                     "board": [p.stat().st_size for p in board]})

    def after_run(self, run_context, history):
        SEEN.append({"after": len(history)})


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """The separable 600 rows through the toy projection, filled in this process."""
    import pyarrow.parquet as pq

    from tests.conftest import separable

    root = tmp_path_factory.mktemp("tracking")
    (root / "source").mkdir()
    pq.write_table(separable(), root / "source" / "a.parquet")
    raycache.fill(toy_fill(str(root / "source"), str(root / "store"), in_process=True))
    return str(root / "store")


def train(store: str, **over) -> Any:
    return raycache.train({"cache": "toy", "store": {"uri": store}, "label": "label",
                           "head": "mlp", "hidden": [16], "loop": {"epochs": 3},
                           "progress": False, "resume": False, **over})


def test_each_epoch_is_in_the_run_folder_and_told_to_callbacks_as_it_ends(store):
    SEEN.clear()
    run = train(store, tracking=[{"kind": "tests.test_tracking:Recorder", "tag": "t"}])
    assert SEEN[0]["before"] == run.spec.run_name
    assert SEEN[0]["config"]["head.hidden"] == "[16]"
    assert SEEN[0]["config"]["evaluation.monitor"] == "val_acc"
    epochs = SEEN[1:-1]
    assert [e["epoch"] for e in epochs] == [1, 2, 3] and {e["tag"] for e in epochs} == {"t"}
    for e in epochs:  # at epoch k's end, metrics.jsonl already holds epochs 1..k
        assert [json.loads(line)["epoch"] for line in e["lines"]] == list(range(1, e["epoch"] + 1))
        assert e["board"] and e["board"][0] > 0  # TensorBoard's event file, flushed
    assert epochs[0]["board"][0] < epochs[1]["board"][0] < epochs[2]["board"][0]
    told = [e["checkpoint"] for e in epochs if e["checkpoint"] is not None]
    assert told  # an epoch that saved none is told None, one that saved its folder
    assert any(c.endswith(Path(run.checkpoint).name) for c in told)  # the served one was told
    assert SEEN[-1] == {"after": 3}
    lines = Path(run.checkpoint).parent.joinpath("metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["val_acc"] for line in lines] == [m["val_acc"] for m in run.history]


def test_tracking_entries_are_checked_before_any_work():
    with pytest.raises(ConfigError) as e:
        load_config({"cache": "c", "tracking": ["mlfow", {"kind": "wandb", "projcet": "p"}, 3],
                     "sweep": {"optim.lr": [1e-3, 3e-3]}})
    text = str(e.value)
    assert "tracking[0].kind='mlfow': unknown; expected one of ['mlflow', 'wandb']" in text
    assert "tracking[1].projcet: not a setting of the wandb tracker" in text
    assert "tracking[2]=3" in text and "sweep member" not in text


def test_mlflow_logs_each_epoch_to_a_file_store(store, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3's file store, opted in
    uri = (tmp_path / "mlruns").as_uri()
    run = train(store, tracking=[{"kind": "mlflow", "tracking_uri": uri,
                                  "experiment_name": "toy-runs", "tags": {"team": "a"}}])
    client = MlflowClient(tracking_uri=uri)
    found = client.search_runs([client.get_experiment_by_name("toy-runs").experiment_id])
    assert len(found) == 1
    logged = found[0]
    assert logged.info.status == "FINISHED" and logged.info.run_name == run.spec.run_name
    assert logged.data.tags["team"] == "a" and logged.data.params["head.head"] == "mlp"
    history = client.get_metric_history(logged.info.run_id, "val_acc")
    assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == [
        (m["epoch"], pytest.approx(m["val_acc"])) for m in run.history]


def wandb_records(path: str) -> list[Any]:
    """The records of an offline W&B run file (a LevelDB log of protobuf records after a
    7-byte W&B header), read without W&B's service."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, block, pos, buf, out = Path(path).read_bytes(), 32768, 7, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header: padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        buf, pos = buf + data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (1, 4):  # a whole record, or a record's last piece
            record = pb.Record()
            record.ParseFromString(buf)
            out.append(record)
            buf = b""
    return out


def test_wandb_logs_each_epoch_offline(store, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = train(store, tracking=[{"kind": "wandb", "project": "toy-runs",
                                  "dir": str(tmp_path)}])
    files = glob.glob(os.path.join(tmp_path, "wandb", "offline-run-*", "run-*.wandb"))
    assert len(files) == 1
    records = wandb_records(files[0])
    started = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert started[0].display_name == run.spec.run_name and started[0].project == "toy-runs"
    history = [{"step": r.history.step.num, **{i.key or "/".join(i.nested_key):
                                                json.loads(i.value_json) for i in r.history.item}}
               for r in records if r.WhichOneof("record_type") == "history"]
    assert [(h["step"], h["val_acc"]) for h in history] == [
        (m["epoch"], pytest.approx(m["val_acc"])) for m in run.history]
    assert any(r.WhichOneof("record_type") == "exit" for r in records)

"""A run folder (raycache._train.folder): a checkpoint's whole state, the run's artifacts, and
the driver reading the folder once (RunFolder)."""

import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
import torch

import raycache
from raycache._cache.store import Store
from raycache._heads.specs import HEAD_CONFIG, build_head
from raycache._train.folder import checkpoints as ckpt
from raycache._train.folder import run_folder
from raycache._train.folder.metrics import CURVES, METRICS, TENSORBOARD, write_artifacts
from tests.conftest import separable, toy_fill
from tests.train_specs import HEAD


def test_checkpoint_folder_holds_the_whole_state_and_load_head_needs_no_ray(tmp_path):
    model = build_head(HEAD)
    state = {"model": model.state_dict(), "rng": ckpt.rng_state(), "progress": {"epoch": 3}}
    local = tmp_path / "tmp"
    local.mkdir()
    ckpt.write_folder(str(local), HEAD, model.state_dict(), state, {"metrics": {"val_acc": 1}})
    store = Store(str(tmp_path / "store"))
    run = store.path("run")
    ckpt.upload(store, str(local), f"{run}/{ckpt.checkpoint_name(3)}")
    ckpt.upload(store, str(local), f"{run}/{ckpt.checkpoint_name(7)}")
    os.remove(f"{run}/{ckpt.checkpoint_name(7)}/{ckpt.STATE}")  # a torn checkpoint
    found = ckpt.latest(store, run)
    assert found.endswith("checkpoint_000003")
    assert ckpt.read_state(store, found)["progress"] == {"epoch": 3}
    saved = json.loads(store.read_bytes(f"{found}/{HEAD_CONFIG}"))
    assert saved["head"]["encoder_configs"]["e"]["kind"] == "torch"
    code = ("import sys; from raycache._heads.loaded import load_head; "
            f"h = load_head({found!r}); print(h.predict_embeddings([[0, 0, 0, 1]]).tolist()); "
            "assert not any(m == 'ray' or m.startswith('ray.') for m in sys.modules), 'ray'")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ}, timeout=120)
    assert out.returncode == 0, out.stderr
    expected = model(torch.tensor([[0.0, 0, 0, 1]])).argmax(1).tolist()
    assert out.stdout.strip() == str(expected)
    ckpt.prune(store, run, keep=1)
    assert store.listdir(run) == ["checkpoint_000007"]


def test_run_artifacts_metrics_tensorboard_and_curves(tmp_path):
    history = [{"epoch": e, "train_loss": 1 / e, "val_loss": 1.1 / e, "train_acc": 0.5,
                "val_acc": 0.4 + e / 10, "placement": "cpu"} for e in (1, 2, 3)]
    store = Store(str(tmp_path))
    write_artifacts(store, str(tmp_path), history)
    lines = (tmp_path / METRICS).read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [1, 2, 3]
    assert (tmp_path / CURVES).read_bytes()[:4] == b"\x89PNG"
    (events,) = (tmp_path / TENSORBOARD).iterdir()
    assert scalars(events.read_bytes(), "val_acc") == pytest.approx([0.5, 0.6, 0.7])


def scalars(blob: bytes, tag: str) -> list[float]:
    """Values of one tag in a TFRecord event file (length, crc, Event proto, crc)."""
    import struct

    from tensorboardX.proto import event_pb2

    out, i = [], 0
    while i < len(blob):
        (n,) = struct.unpack("<Q", blob[i:i + 8])
        event = event_pb2.Event.FromString(blob[i + 12:i + 12 + n])
        out += [v.simple_value for v in event.summary.value if v.tag == tag]
        i += 12 + n + 4
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("run_folder")
    (root / "source").mkdir()
    pq.write_table(separable(n=60), root / "source" / "a.parquet")
    raycache.fill(toy_fill(str(root / "source"), str(root / "store"), rows_per_shard=30,
                           in_process=True))
    return str(root / "store")


def test_a_train_lists_its_checkpoints_once_before_and_once_after_training(store, monkeypatch):
    listed = []
    real = run_folder.latest
    monkeypatch.setattr(run_folder, "latest", lambda s, path: listed.append(path) or real(s, path))
    cfg = {"cache": "toy", "store": {"uri": store}, "num_workers": 0, "loop": {"epochs": 1},
           "progress": False}
    first = raycache.train(cfg)
    assert len(listed) == 2  # opened, then after the checkpoints training wrote
    listed.clear()
    again = raycache.train(cfg)  # finished before: returned from what the folder held
    assert len(listed) == 1 and again.checkpoint == first.checkpoint


def test_a_folder_opened_empty_resumes_from_nothing(tmp_path):
    from raycache._cache.store import Store

    store = Store(str(tmp_path))
    folder = run_folder.RunFolder.open(store, store.path("toy", "fp", "runs", "r"))
    assert folder.record is None and folder.latest is None
    assert not folder.finished and folder.epochs_done == 0

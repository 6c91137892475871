"""Training on a filled cache under Ray: local mode by default, run records and artifacts,
re-running a config, never overwriting another run, and the efficient-training options."""

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file

import raycache
from raycache import ConfigError
from raycache._cli import main
from tests.conftest import separable, toy_fill

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def store(ray_session, tmp_path_factory) -> str:
    """One filled toy cache (600 rows, 3 separable classes) for the module."""
    root = tmp_path_factory.mktemp("train")
    (root / "source").mkdir()
    pq.write_table(separable(), root / "source" / "a.parquet")
    raycache.fill(toy_fill(str(root / "source"), str(root / "store")))
    return str(root / "store")


def cfg(store: str, **over) -> dict:
    return {"cache": "toy", "store": {"uri": store}, "epochs": 3, "lr": 0.05,
            "batch_size": 32, "progress": False, **over}


def run_dir(run) -> Path:
    return Path(run.spec.run_dir)


def test_small_cache_trains_in_process_and_leaves_a_complete_run_folder(store, capfd):
    run = raycache.train(cfg(store, epochs=4, progress=True, run_name="local"))
    assert run.spec.num_workers == 0 and run.spec.placement == "cpu"
    assert run.metrics["val_acc"] > 0.9 and len(run.history) == 4
    out = capfd.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("epoch ")]
    assert [line.split()[1] for line in lines] == ["1/4", "2/4", "3/4", "4/4"], out
    assert "rows/s" in lines[0] and "eta" in lines[0]
    assert "Reporting training result" not in out and "Reported metrics" not in out
    folder = run_dir(run)
    assert [json.loads(x)["epoch"] for x in (folder / "metrics.jsonl").read_text().splitlines()] \
        == [1, 2, 3, 4]
    assert (folder / "curves.png").stat().st_size > 0
    assert list((folder / "tensorboard").glob("events.out.tfevents.*"))
    record = json.loads((folder / "run.json").read_text())
    assert record["status"] == "finished" and record["digest"] == run.spec.digest()
    head_json = (Path(run.checkpoint) / "head.json").read_text()
    assert store not in head_json  # no store
    saved = json.loads(head_json)["head"]["encoder_configs"]
    assert all(not c.get("options") for c in saved.values())  # no storage options, no secrets
    head = run.load_head()
    assert head.spec == run.spec.head and head.spec.weights_digests["proj"]
    assert main(["runs", "toy", "--store", store]) == 0
    listing = capfd.readouterr().out
    assert "local" in listing and "finished" in listing and " 4/4 " in listing


def test_local_mode_neither_starts_nor_joins_a_ray_cluster(store, tmp_path):
    """In a fresh process (this one runs the session's Ray): a small cache trains in-process
    and Ray is never initialised, not even to pick the placement."""
    import subprocess
    import sys

    code = ("import json, sys, ray, raycache\n"
            "run = raycache.train(json.loads(sys.argv[1]))\n"
            "print(run.spec.num_workers, run.spec.placement, ray.is_initialized())")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = subprocess.run([sys.executable, "-c", code, json.dumps(cfg(store, run_name="fresh"))],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-3:] == ["0", "cpu", "False"]


def test_same_config_again_returns_its_run_and_other_runs_are_never_overwritten(store):
    first = raycache.train(cfg(store, seed=1))
    assert first.spec.run_name.startswith("linear-")  # derived from the config
    again = raycache.train(cfg(store, seed=1))
    assert again.spec.run_name == first.spec.run_name and again.checkpoint == first.checkpoint
    assert again.history == first.history and again.seconds < first.seconds
    folder = run_dir(first)
    before = {p: p.stat().st_mtime_ns for p in folder.rglob("*")}
    with pytest.raises(ConfigError, match="already holds a run of a different config"):
        raycache.train(cfg(store, seed=2, run_name=first.spec.run_name))
    with pytest.raises(ConfigError, match="resume is false"):
        raycache.train(cfg(store, seed=1, run_name=first.spec.run_name, resume=False))
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*")} == before
    fresh = raycache.train(cfg(store, seed=1, resume=False))
    assert fresh.spec.run_name != first.spec.run_name and not fresh.resumed_from


@pytest.mark.parametrize("optimizer", ["adamw", "adam", "sgd", "rmsprop", "adagrad"])
def test_each_optimizer_trains(store, optimizer):
    lr = {"sgd": 0.1, "adagrad": 0.1}.get(optimizer, 0.02)
    run = raycache.train(cfg(store, optimizer=optimizer, lr=lr, nesterov=optimizer == "sgd",
                             resume=False))
    assert run.metrics["val_acc"] > 0.85, (optimizer, run.history)


def test_schedule_warmup_and_accumulation_show_in_the_lr(store):
    run = raycache.train(cfg(store, epochs=4, schedule="cosine", warmup_steps=5, grad_accum=2,
                             resume=False))
    lrs = [m["lr"] for m in run.history]
    assert all(a > b for a, b in zip(lrs, lrs[1:], strict=False)) and lrs[-1] < 0.05 * 0.2
    assert run.metrics["val_acc"] > 0.85


def test_early_stopping_keeps_and_saves_the_best_weights(store):
    run = raycache.train(cfg(store, epochs=30, lr=0.2, monitor="val_acc", early_stopping=True,
                             patience=2, resume=False))
    accs = [m["val_acc"] for m in run.history]
    best_epoch = accs.index(max(accs)) + 1
    assert len(run.history) == best_epoch + 2 < 30  # stopped after `patience` flat epochs
    saved = json.loads((Path(run.checkpoint) / "head.json").read_text())
    assert saved["weights"] == "best" and saved["best"] == {"val_acc": max(accs),
                                                            "epoch": best_epoch}
    state = torch.load(Path(run.checkpoint) / "state.pt", weights_only=False)
    head = load_file(Path(run.checkpoint) / "head.safetensors")
    for k, v in state["best_weights"].items():
        torch.testing.assert_close(head[k], v)


def test_precision_smoothing_and_class_weights(store):
    bf16 = raycache.train(cfg(store, precision="bfloat16", resume=False))
    assert bf16.metrics["val_acc"] > 0.85
    plain = raycache.train(cfg(store, epochs=6, resume=False))
    smooth = raycache.train(cfg(store, epochs=6, label_smoothing=0.3, resume=False))
    assert smooth.metrics["train_loss"] > plain.metrics["train_loss"] + 0.1
    ignored = raycache.train(cfg(store, epochs=6, class_weights=[1.0, 1.0, 0.0], resume=False))
    assert plain.metrics["val_acc"] > 0.95 and ignored.metrics["val_acc"] < 0.85
    with pytest.raises(ConfigError, match="class_weights has 2 values.*3 classes"):
        raycache.train(cfg(store, class_weights=[1.0, 2.0]))
    with pytest.raises(ConfigError, match="float16.*bfloat16"):
        raycache.train(cfg(store, precision="float16"))


def test_stream_placement_in_ddp(store):
    run = raycache.train(cfg(store, epochs=2, placement="stream", num_workers=2,
                             resume=False))
    assert run.spec.num_workers == 2
    assert [m["placement"] for m in run.history] == ["stream"] * 2
    assert run.metrics["val_acc"] > 0.8
    assert run.metrics["train_rows"] + run.metrics["val_rows"] == 600

"""pipeline overlap: true trains on the fill's shards as they land: the first step before the
manifest exists, a result within the stated tolerance of fill-then-train, and a fill failing
part-way stops the training with FillFailed and stays resumable. In local mode (no Ray cluster)
and under DDP (two Ray Train workers sharing the landing shards through an OverlapFeed actor)."""

import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import toy_encoders
import toy_heads

import raycache
from raycache import ConfigError, FillFailed
from raycache._pipeline import pipeline
from raycache._train.data.overlap import PREFIX
from raycache._train.driver.checks import load_config as load_train
from raycache._train.driver.checks import overlap_problems
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(180)

TOLERANCE = {"val_loss": 0.02, "val_acc": 0.02}
"""Overlapped against fill-then-train, same seed, final epoch (README, "Training on the first
pass"): epoch 1 sees the shards in landing order, so the weights differ a little."""


@pytest.fixture
def source(tmp_path) -> Path:
    (tmp_path / "source").mkdir()
    pq.write_table(separable(n=600), tmp_path / "source" / "a.parquet", row_group_size=100)
    return tmp_path / "source"


def config(source: Path, store: Path, factory: str, **kwargs) -> dict:
    fill = toy_fill(str(source), str(store), rows_per_shard=100, batch_size=100,
                    in_process=True)
    fill["encoders"][0].update(factory=f"toy_encoders:{factory}")
    fill["encoders"][0]["kwargs"].update(kwargs)
    train = {"epochs": 4, "batch_size": 32, "lr": 0.01, "num_workers": 0, "progress": False,
             "head": "toy_heads:recording_linear"}
    return {"fill": fill, "train": train, "overlap": True}


def test_training_starts_before_the_commit_and_ends_near_fill_then_train(
        source, tmp_path, monkeypatch):
    store = tmp_path / "store"
    monkeypatch.setattr(toy_encoders, "GATE", toy_encoders.GATE.__class__())
    monkeypatch.setattr(toy_heads, "WATCH", str(store))
    monkeypatch.setattr(toy_heads, "FIRST_STEP", [])
    cfg = config(source, store, "gated_projection", after=1)  # the fill waits for a step
    overlapped = pipeline(cfg)
    assert toy_heads.FIRST_STEP == [False]  # the first step was trained with no manifest
    check_near_fill_then_train(overlapped, cfg, store)


def check_near_fill_then_train(overlapped, cfg: dict, store: Path) -> None:
    assert not overlapped.fill.hit and overlapped.fill.cache.manifest.rows == 600
    sequential = raycache.train({**cfg["train"], "cache": "toy", "store": {"uri": str(store)},
                                 "run_name": "fill-then-train"})  # the same committed fill
    a, b = overlapped.train.history, sequential.history
    assert [m["train_rows"] for m in a] == [m["train_rows"] for m in b]  # every row, each epoch
    assert [m["val_rows"] for m in a] == [m["val_rows"] for m in b]
    for metric, tolerance in TOLERANCE.items():
        assert abs(a[-1][metric] - b[-1][metric]) <= tolerance, (metric, a[-1], b[-1])
    assert a[0]["train_loss"] != b[0]["train_loss"]  # epoch 1's order is the landing order


class Polled:
    """toy_encoders.GATE for a DDP run: open once a worker's first step told the FirstStep
    actor (the fill runs in the driver; the steps in the workers)."""

    def __init__(self, signal):
        self.signal = signal

    def wait(self, timeout: float) -> None:
        import ray

        end = time.monotonic() + timeout
        while ray.get(self.signal.first.remote()) is None and time.monotonic() < end:
            time.sleep(0.1)


@pytest.mark.timeout(300)
def test_ddp_workers_share_the_landing_shards_and_end_near_fill_then_train(
        ray_session, source, tmp_path, monkeypatch):
    import ray

    store = tmp_path / "store"
    signal = ray.remote(toy_heads.FirstStep).options(
        name=toy_heads.SIGNAL, namespace=toy_heads.NAMESPACE).remote(str(store))
    try:
        monkeypatch.setattr(toy_encoders, "GATE", Polled(signal))
        cfg = config(source, store, "gated_projection", after=1, timeout=120)
        cfg["train"]["num_workers"] = 2
        start = time.perf_counter()
        overlapped = pipeline(cfg)
        print(f"overlapped DDP pipeline: {time.perf_counter() - start:.1f} s")
        assert ray.get(signal.first.remote()) is False  # a worker stepped with no manifest
    finally:
        ray.kill(signal)
    assert overlapped.train.spec.num_workers == 2
    # each shard read by one worker only: epoch 1 saw every training row once, as later ones
    check_near_fill_then_train(overlapped, cfg, store)
    feeds = [a for a in ray.util.list_named_actors(all_namespaces=True)
              if a["name"].startswith(PREFIX)]
    assert feeds == []  # the OverlapFeed actor went with its pipeline


@pytest.mark.parametrize("workers", [0, 2])
def test_a_fill_failing_part_way_stops_training_clearly_and_resumes(
        workers, request, source, tmp_path, monkeypatch):
    if workers:
        request.getfixturevalue("ray_session")
    store = tmp_path / "store"
    monkeypatch.setattr(toy_encoders, "FAIL_AT", 3)  # two shards written, then an error
    cfg = config(source, store, "flaky_projection")
    cfg["train"].update(num_workers=workers, max_failures=1)  # a restart stops at once too
    with pytest.raises(FillFailed) as caught:
        pipeline(cfg)
    message = str(caught.value)
    assert "failed on purpose at call 3" in message and "resume" in message
    assert "2 written shard(s) are kept" in message
    assert not list(store.glob("toy/*/manifest.json"))
    assert len(list(store.glob("toy/*/_progress/*.json"))) == 2

    monkeypatch.setattr(toy_encoders, "FAIL_AT", None)
    resumed = raycache.fill(cfg["fill"])
    assert resumed.resumed_rows == 200 and resumed.encoded_rows == 400


def test_overlap_refuses_what_it_cannot_do_before_any_work():
    pairs = load_train({"cache": "toy", "objective": "pairs",
                               "pairs": {"path": "p.parquet", "left": "a", "right": "b"}})
    assert any("'pairs'" in p and "overlap: false" in p for p in overlap_problems(pairs))
    assert overlap_problems(load_train({"cache": "toy", "num_workers": 2})) == []
    with pytest.raises(ConfigError, match="overlap='yes'"):
        pipeline({"fill": {}, "train": {}, "overlap": "yes"})

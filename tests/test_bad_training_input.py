"""Degenerate training input refused before training, a diverging loss stopped where it
diverges, a deterministic worker error failed at once, and workers the cluster cannot hold
refused before Ray Train starts: a clear raycache error each time, never a silent result."""

import json
import os
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raycache
from raycache import (
    ConfigError,
    CorruptShard,
    DivergedError,
    EncoderError,
    RaycacheError,
    SourceError,
)
from raycache._train.driver.checks import load_config
from raycache._train.folder.record import list_runs
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """Toy caches of 80 rows, filled in-process: toy (3 classes), one (a single class), unique
    (every row its own id) and sparse (ids far beyond 0..K-1)."""
    root = tmp_path_factory.mktemp("bad-input")
    table = separable(n=80)
    labels = {"one": [1] * 80, "unique": list(range(80)),
              "sparse": [10**12 + i % 2 for i in range(80)]}
    for name, t in (("toy", table), *((n, table.set_column(2, "label", pa.array(v, pa.int64())))
                                      for n, v in labels.items())):
        (root / name).mkdir()
        pq.write_table(t, root / name / "a.parquet")
        raycache.fill(toy_fill(str(root / name), str(root / "store"), name=name,
                               in_process=True))
    return str(root / "store")


def train_cfg(store: str, **over) -> dict:
    return {"cache": "toy", "store": {"uri": store}, "epochs": 2, "num_workers": 0,
            "batch_size": 16, "progress": False, **over}


@pytest.mark.parametrize(("over", "named"), [
    ({"lr": float("inf")}, "optim.lr=inf"),
    ({"lr": float("nan")}, "optim.lr=nan"),
    ({"optim": {"weight_decay": float("inf")}}, "optim.weight_decay=inf"),
    ({"optim": {"grad_clip": float("nan")}}, "optim.grad_clip=nan"),
    ({"evaluation": {"min_delta": float("inf")}}, "evaluation.min_delta=inf"),
    ({"objective": "groups", "groups": {"margin": float("inf")}}, "groups.margin=inf"),
    ({"loss": {"class_weights": [1.0, float("nan"), 1.0]}}, "loss.class_weights=[1.0, nan"),
    ({"dropout": float("nan")}, "dropout=nan"),
    ({"sweep": {"lr": [0.01, float("inf")]}}, "sweep member {'lr': inf}: optim.lr=inf"),
])
def test_non_finite_settings_are_refused_when_loaded(over, named):
    with pytest.raises(ConfigError) as err:
        load_config({"cache": "toy", **over})
    assert named in str(err.value) and "finite" in str(err.value)


def test_yaml_inf_learning_rate_is_refused(tmp_path):
    path = tmp_path / "train.yaml"
    path.write_text("cache: toy\noptim:\n  lr: .inf\n  momentum: -0.5\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert "optim.lr=inf" in str(err.value) and "optim.momentum=-0.5" in str(err.value)


def test_a_label_of_one_class_is_refused(store):
    for objective in ("classification", "groups"):
        with pytest.raises(ConfigError, match=r"holds one (class|group) id only \(\[1\]\)"):
            raycache.train(train_cfg(store, cache="one", objective=objective))


def test_labels_that_cannot_train_a_head_are_refused(store):
    with pytest.raises(ConfigError, match="no group holds two rows"):
        raycache.train(train_cfg(store, cache="unique", objective="groups"))
    with pytest.raises(ConfigError, match=r"holds ids up to 1000000000001 over 80 rows"):
        raycache.train(train_cfg(store, cache="sparse"))  # not an 8 TB bincount
    with pytest.raises(ConfigError, match="every class the label 'label' holds weighs 0"):
        raycache.train(train_cfg(store, loss={"class_weights": [0.0, 0.0, 0.0]}))


def test_a_monitor_that_is_no_metric_is_a_config_error(store):
    with pytest.raises(ConfigError, match=r"evaluation.monitor='val_acc1' is not a metric"):
        raycache.train(train_cfg(store, evaluation={"monitor": "val_acc1"}, epochs=1))


@pytest.mark.parametrize(("fraction", "empty"), [(0.0001, "validation"), (0.00005, "validation"),
                                                 (0.9999, "training")])
def test_a_split_with_no_validation_or_no_training_rows_is_refused(store, fraction, empty):
    with pytest.raises(ConfigError, match=f"with no {empty} rows") as err:
        raycache.train(train_cfg(store, val_fraction=fraction))
    assert f"val_fraction={fraction}" in str(err.value)


def test_a_source_of_no_rows_commits_no_cache(tmp_path):
    (tmp_path / "empty").mkdir()
    pq.write_table(separable(n=10).slice(0, 0), tmp_path / "empty" / "a.parquet")
    with pytest.raises(SourceError, match="holds no rows"):
        raycache.fill(toy_fill(str(tmp_path / "empty"), str(tmp_path / "store"),
                               in_process=True))
    assert not list(tmp_path.glob("store/**/manifest.json"))


def test_a_cache_of_no_rows_is_refused_before_training(tmp_path):
    """An empty cache as earlier versions committed it (trained, it raised KeyError)."""
    from raycache._fill.commit import commit
    from raycache._fill.plan import load_config as load_fill
    from raycache._fill.plan import plan

    (tmp_path / "empty").mkdir()
    pq.write_table(separable(n=10).slice(0, 0), tmp_path / "empty" / "a.parquet")
    p = plan(load_fill(toy_fill(str(tmp_path / "empty"), str(tmp_path / "store"))))
    commit(p, [], 0.0)
    with pytest.raises(ConfigError, match="holds no rows: nothing to train on"):
        raycache.train(train_cfg(str(tmp_path / "store")))


def test_a_diverging_loss_stops_the_run_naming_epoch_and_step(store):
    with pytest.raises(DivergedError) as err:
        raycache.train(train_cfg(store, lr=1e38, optimizer="sgd", momentum=0.0,
                                 run_name="diverges"))
    text = str(err.value)
    assert "diverged in epoch 1" in text and "optimizer step" in text and "lower optim.lr" in text
    [run] = [r for r in list_runs(raycache.open_cache("toy", store)) if r.name == "diverges"]
    assert run.status == "failed"  # not "finished", and no head saved
    assert not list(Path(store).glob("toy/*/runs/diverges/checkpoint_*"))
    record = json.loads(next(Path(store).glob("toy/*/runs/diverges/run.json")).read_text())
    assert record["resumable"] is False


# stacked linear heads, stacked MLPs, and heads one by one (`stacked`: LayerNorms)
@pytest.mark.parametrize("head", ["linear", "mlp", "stacked"])
def test_a_diverging_sweep_member_stops_alone_and_the_others_go_on(store, head):
    name = f"sweep-diverges-{head}"
    result = raycache.train(train_cfg(store, head=head, optimizer="sgd", momentum=0.0,
                                      epochs=3, run_name=name, monitor="val_loss",
                                      sweep={"optim.lr": [0.05, 1e38, 0.1]}))
    first = 2 if head == "mlp" else 1  # an mlp's epoch 1 is the linear solve: no steps
    [gone] = result.diverged
    assert gone["member"] == 1 and f"diverged in epoch {first}" in gone["error"]
    assert "lower optim.lr (now 1e+38)" in gone["error"]
    rows = {row["member"]: row for row in result.sweep}
    assert rows[1]["stopped"] and rows[1]["epochs"] == first - 1 and not rows[1]["selected"]
    for i in (0, 2):  # the others trained every epoch, to finite losses
        assert rows[i]["epochs"] == 3 and not rows[i]["diverged"]
        assert all(np.isfinite(m["train_loss"]) for m in rows[i]["history"])
    assert result.best["member"] in (0, 2) and np.isfinite(result.best["val_loss"])
    assert "member #1 optim.lr=1e+38 DIVERGED" in result.summary()
    record = json.loads(next(Path(store).glob(f"toy/*/runs/{name}/run.json")).read_text())
    assert record["status"] == "finished" and record["diverged"][0]["member"] == 1
    sweep = [json.loads(line) for line in
             next(Path(store).glob(f"toy/*/runs/{name}/sweep.jsonl")).read_text().splitlines()]
    assert sweep[1]["diverged"] and not sweep[0]["diverged"]


def test_a_sweep_whose_every_member_diverges_fails(store):
    with pytest.raises(DivergedError, match="as did every other member of the sweep"):
        raycache.train(train_cfg(store, optimizer="sgd", momentum=0.0, run_name="all-gone",
                                 sweep={"optim.lr": [1e38, 3e38]}))


def test_a_failed_run_says_what_running_it_again_does(store):
    """Not "it resumes from its last checkpoint" where it saved none."""
    with pytest.raises(RaycacheError, match="saved no checkpoint, so running it again starts "
                                            "over") as err:
        raycache.train(train_cfg(store, head="toy_heads:failing_linear"))
    assert "RuntimeError: toy: the head's forward pass failed" in str(err.value)


def test_nan_embeddings_stop_the_run_at_the_batch_that_holds_them(tmp_path, monkeypatch):
    """A fill refuses them now (tests/test_bad_rows.py); a cache that an older raycache
    committed with them still stops training at the first batch."""
    table = separable(n=80)
    feats = np.stack(table.column("features").to_numpy(zero_copy_only=False))
    feats[:, 0] = np.nan  # every row: whichever batch comes first holds one
    table = table.set_column(1, "features", pa.FixedSizeListArray.from_arrays(
        pa.array(feats.astype(np.float32).reshape(-1)), 8))
    (tmp_path / "source").mkdir()
    pq.write_table(table, tmp_path / "source" / "a.parquet")
    cfg = toy_fill(str(tmp_path / "source"), str(tmp_path / "store"), in_process=True)
    with pytest.raises(EncoderError, match="gave non-finite outputs"):
        raycache.fill(cfg)
    from raycache._fill import stages

    monkeypatch.setattr(stages, "bad_rows", lambda emb: None)  # as an older raycache did
    raycache.fill(cfg)
    with pytest.raises(DivergedError, match=r"epoch 1: the training loss became NaN or "
                                            r"infinite at batch 1 of the epoch"):
        raycache.train(train_cfg(str(tmp_path / "store")))


def test_pairs_with_non_finite_scores_are_refused(store, tmp_path):
    keys = raycache.open_cache("toy", store).read_table(["id"]).column("id").to_pylist()
    pq.write_table(pa.table({"left": keys[:10], "right": keys[10:20],
                             "score": [0.5] * 9 + [float("nan")]}), tmp_path / "pairs.parquet")
    with pytest.raises(ConfigError, match="1 NaN or infinite values"):
        raycache.train(train_cfg(store, objective="pairs",
                                 pairs={"path": str(tmp_path / "pairs.parquet")}))


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_use_gpu_in_process_without_a_gpu_is_refused(store):
    with pytest.raises(ConfigError, match="sees no CUDA GPU"):
        raycache.train(train_cfg(store, use_gpu=True))


def test_the_failure_policy_raises_deterministic_errors_and_retries_the_rest():
    from ray.train import FailureConfig
    from ray.train.v2._internal.execution.failure_handling import FailureDecision
    from ray.train.v2.api.exceptions import WorkerGroupError

    from raycache._train.driver.failures import FailFast

    policy = FailFast(FailureConfig(max_failures=3))
    corrupt = WorkerGroupError("rank 1", {0: RuntimeError("peer"), 1: CorruptShard("bad")})
    assert policy.make_decision(corrupt) == FailureDecision.RAISE
    assert policy.make_decision(WorkerGroupError("x", {0: OSError("reset")})) == \
        FailureDecision.RETRY


@pytest.mark.ray
@pytest.mark.timeout(240)
def test_workers_the_cluster_cannot_hold_are_refused_before_ray_train_starts(ray_session,
                                                                            store):
    """The session's Ray has 4 CPUs and no GPU: Ray Train would wait for them forever."""
    with pytest.raises(ConfigError) as err:
        raycache.train(train_cfg(store, num_workers=8, cpus_per_worker=1.0))
    text = str(err.value)
    assert "resources.num_workers=8" in text and "4 CPUs" in text and "at most 4" in text
    with pytest.raises(ConfigError, match="resources.use_gpu=true: the cluster has 4 CPUs and "
                                          "0 GPUs"):
        raycache.train(train_cfg(store, num_workers=2, use_gpu=True))


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_a_deterministic_worker_error_under_ddp_is_not_retried(ray_session, store):
    from toy_heads import BUILDS

    builds = Path(tempfile.gettempdir()) / BUILDS.format(uid=os.getuid())
    builds.unlink(missing_ok=True)
    with pytest.raises(CorruptShard, match="raycache repair"):
        raycache.train(train_cfg(store, num_workers=2, head="toy_heads:corrupt_linear",
                                 max_failures=3))
    # one attempt: each of its 2 workers built the head once at most (the first to fail may
    # stop the other first); every restart would have built it again (4 attempts, >= 4)
    assert 1 <= len(builds.read_text().splitlines()) <= 2
    builds.unlink()

"""Resume after real failures: a DDP worker SIGKILLed mid-run (Ray Train restarts the group
and the run resumes from its last checkpoint), and the driver's whole process group
SIGKILLed (running the same config again resumes). Both end at the metrics of a run that
was never interrupted, with the same seed."""

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import raycache
from tests.conftest import separable, toy_fill
from tests.faults import Driver, kill_matching, wait_for, when

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(900)]

RESULT_KEYS = ("train_loss", "train_acc", "val_loss", "val_acc", "train_rows", "val_rows")


@pytest.fixture(scope="module")
def store(ray_session, tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("faults")
    (root / "source").mkdir()
    pq.write_table(separable(n=800), root / "source" / "a.parquet")
    raycache.fill(toy_fill(str(root / "source"), str(root / "store")))
    return str(root / "store")


def cfg(store: str, run_name: str, **over) -> dict:
    """A slow head (each forward sleeps), so a kill lands between two checkpoints."""
    return {"cache": "toy", "store": {"uri": store}, "head": "toy_heads:slow_linear",
            "epochs": 6, "lr": 0.05, "batch_size": 32, "checkpoint_every": 1,
            "progress": False, "run_name": run_name, "seed": 7, **over}


def results(run) -> list[float]:
    """Every epoch's metrics, flattened (timings left out)."""
    return [float(m[k]) for m in run.history for k in RESULT_KEYS]


def checkpoint_exists(store: str, run_name: str, epoch: int):
    def check() -> bool:
        return any(Path(store).glob(f"toy/*/runs/{run_name}/checkpoint_{epoch:06d}/state.pt"))
    return check


def test_a_killed_worker_is_restarted_and_resumes_from_its_checkpoint(store):
    # 4 epochs (each a DDP checkpoint and report): the kill after checkpoint 2 still lands
    # with epochs left to resume
    reference = raycache.train(cfg(store, "ddp-reference", num_workers=2, epochs=4))
    killer = when(checkpoint_exists(store, "ddp-killed", 2),
                  lambda: kill_matching("RayTrainWorker"), timeout=600)
    run = raycache.train(cfg(store, "ddp-killed", num_workers=2, max_failures=2, epochs=4))
    killer.join(timeout=5)
    assert killer.result, "no Ray Train worker was found to kill"
    # from a checkpoint, not from scratch: the newest one Ray Train had registered when the
    # kill landed (checkpoint 2's files may exist before its report reaches the controller)
    assert run.resumed_from and run.resumed_from[0] >= 1, run.resumed_from
    assert len(run.history) == 4
    assert results(run) == pytest.approx(results(reference), rel=1e-6)


def test_a_killed_driver_resumes_when_the_same_config_runs_again(store, tmp_path):
    import ray

    reference = raycache.train(cfg(store, "local-reference", num_workers=0))
    config = cfg(store, "local-killed", num_workers=0)
    code = ("import raycache, json, sys; "
            f"raycache.train(json.loads({json.dumps(json.dumps(config))}))")
    env = {"RAY_ADDRESS": ray.get_runtime_context().gcs_address,
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    driver = Driver(code, env=env, log=tmp_path / "driver.log")
    try:
        reached = wait_for(checkpoint_exists(store, "local-killed", 2), timeout=300)
    finally:
        driver.kill()
    assert reached, (tmp_path / "driver.log").read_text()[-3000:]
    record = json.loads(next(Path(store).glob("toy/*/runs/local-killed/run.json")).read_text())
    assert record["status"] == "running"  # what a killed driver leaves behind
    from raycache._train.folder.record import list_runs

    listed = {r.name: r.status for r in list_runs(raycache.open_cache("toy", store))}
    assert listed["local-killed"] == "resumable"  # its driver is gone, its checkpoint is not
    run = raycache.train(config)
    assert run.resumed_from and 2 <= run.resumed_from[0] < 6, run.resumed_from
    assert len(run.history) == 6
    assert results(run) == pytest.approx(results(reference), rel=1e-6)

"""Two trains of one run_name never train into one folder: the run's lease (no Ray)."""

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import raycache
from raycache._cache.lease import LEASES, STALE_S
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("lease")
    (root / "source").mkdir()
    pq.write_table(separable(n=90), root / "source" / "a.parquet")
    raycache.fill(toy_fill(str(root / "source"), str(root / "store"), in_process=True))
    return str(root / "store")


def config(store: str, run_name: str, **over) -> dict:
    return {"cache": "toy", "store": {"uri": store}, "run_name": run_name, "epochs": 1,
            "num_workers": 0, "progress": False, **over}


def held_by_another(store: str, run_name: str, age: float = 0.0) -> Path:
    """A lease in the run's folder as another train's, last refreshed `age` seconds ago."""
    [cache] = raycache.ls(store, "toy")
    folder = Path(cache.dir) / "runs" / run_name / LEASES
    folder.mkdir(parents=True)
    lease = folder / "gpu-node-7-4242-0badf00d.json"
    lease.write_text(json.dumps({"host": "gpu-node-7", "pid": 4242, "written": time.time()}))
    os.utime(lease, (time.time() - age, time.time() - age))
    return lease


def test_a_train_of_a_run_another_train_holds_is_refused_naming_both(store):
    lease = held_by_another(store, "shared")
    with pytest.raises(raycache.RaycacheError) as err:
        raycache.train(config(store, "shared"))
    text = str(err.value)
    assert "run_name='shared' is being trained by another train" in text
    assert "host 'gpu-node-7', pid 4242" in text and "choose another run_name" in text
    assert lease.exists() and [p.name for p in lease.parent.iterdir()] == [lease.name]
    assert not (lease.parent.parent / "run.json").exists()  # nothing written for the run


def test_a_stale_lease_is_taken_over(store):
    lease = held_by_another(store, "dead", age=STALE_S + 60)  # its train died
    run = raycache.train(config(store, "dead"))
    assert run.spec.run_name == "dead" and Path(run.checkpoint).is_dir()
    assert not lease.exists()
    assert not lease.parent.exists() or list(lease.parent.iterdir()) == []


def test_two_trains_of_one_run_name_started_together_never_both_train(store):
    results, errors, start = [], [], threading.Barrier(2)

    def train(seed: int) -> None:
        start.wait()
        try:  # two configs under one name: only one may own the folder
            results.append(raycache.train(config(store, "raced", seed=seed)))
        except raycache.RaycacheError as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=train, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(100)
    assert len(results) <= 1 and len(results) + len(errors) == 2
    assert all("is being trained by another train" in e or "different config" in e
               for e in errors), errors
    if results:  # the head in the folder is the winner's
        saved = json.loads((Path(results[0].checkpoint) / "head.json").read_text())
        assert saved["history"] == results[0].history


def test_the_lease_of_a_driver_gone_from_this_host_is_taken_over_at_once(store):
    """A driver killed on this machine: its run resumes at once, not after the lease expires."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    lease = held_by_another(store, "killed")
    lease.write_text(json.dumps({"host": socket.gethostname(), "pid": gone.pid}))
    run = raycache.train(config(store, "killed"))
    assert run.spec.run_name == "killed" and not lease.exists()

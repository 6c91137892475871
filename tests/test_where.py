"""Where auto runs a fill, a prediction and a training run, decided from what is there: pinned
on described machines and clusters, and the GCS look-up checked against a running Ray."""

import os
import sys
from types import SimpleNamespace

import pytest

from raycache._compute import where
from raycache._compute.where import AUTO_IN_PROCESS_ROWS, LOCAL_CORES, Cluster
from raycache._compute.workers import AUTO_LOCAL_BYTES
from raycache._fill.encode import in_process
from raycache._fill.plan import load_config as load_fill
from raycache._predict.config import AUTO_IN_PROCESS_BYTES, PredictConfig
from raycache._predict.run import in_process as predict_in_process
from raycache._train.driver.checks import load_config
from raycache._train.driver.placement import resolve_workers
from tests.conftest import toy_fill

pytestmark = pytest.mark.timeout(120)

NODE = {"CPU": 2.0, "memory": 16e9}
MILLION = 1_000_000


def fill_cfg(**over):
    return load_fill(toy_fill("src", "store", **over))


@pytest.fixture
def nothing_there(monkeypatch):
    """No Ray cluster connected or named."""
    import ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)


def cluster_of(monkeypatch, *nodes: dict) -> None:
    monkeypatch.setattr(where, "look", lambda: Cluster(tuple(nodes), "10.0.0.1:6379"))


def test_no_cluster_fills_in_process_whatever_the_size(nothing_there, monkeypatch):
    cfg = fill_cfg()
    for rows in (600, MILLION, None):  # None: rows not counted (JSONL, CSV)
        local, why = in_process(cfg, rows)
        assert local and why == f"no Ray cluster; {os.cpu_count()} CPUs here"
    assert not in_process(fill_cfg(num_gpus=1), 600)[0]  # GPU actors, one model per GPU
    assert not in_process(fill_cfg(concurrency=2), 600)[0]  # an actor pool asked for
    assert in_process(fill_cfg(in_process=True), 10**9) == (True, "in_process: true")
    assert not in_process(fill_cfg(in_process=False), 6)[0]


def test_a_big_machine_starts_ray_for_a_large_fill(nothing_there):
    decide = where.in_process
    assert decide("auto", cpu=True, concurrency="auto", rows=MILLION, cores=LOCAL_CORES)[0]
    local, why = decide("auto", cpu=True, concurrency="auto", rows=MILLION, cores=64)
    assert not local and "64 CPUs" in why
    assert decide("auto", cpu=True, concurrency="auto", rows=AUTO_IN_PROCESS_ROWS, cores=64)[0]


def test_one_node_runs_here_several_nodes_on_ray_unless_few_rows(monkeypatch):
    cfg = fill_cfg()
    cluster_of(monkeypatch, NODE)
    local, why = in_process(cfg, MILLION)
    assert local and why == "a Ray cluster of one node (2 CPUs): actors would share its cores"
    cluster_of(monkeypatch, {"CPU": 64.0})  # one big node: as a big machine
    assert not in_process(cfg, MILLION)[0] and in_process(cfg, 10_000)[0]
    cluster_of(monkeypatch, NODE, NODE, NODE)
    local, why = in_process(cfg, MILLION)
    assert not local and why == "a Ray cluster of 3 nodes (6 CPUs)"
    local, why = in_process(cfg, 10_000)  # an incremental fill's changed rows
    assert local and why.startswith("10,000 rows")
    cluster_of(monkeypatch)  # a cluster that could not be asked (a Ray Client address):
    assert in_process(cfg, 600) == (False, "a Ray cluster")  # its GPUs unknown: pool.num_gpus auto
    cpu = fill_cfg(num_gpus=0)  # a CPU fill: few rows here, many on the cluster
    assert not in_process(cpu, MILLION)[0] and in_process(cpu, 600)[0]


def test_predict_auto_takes_the_clusters_gpus(monkeypatch):
    cfg = PredictConfig(checkpoint="ckpt", input="in", output="out")
    cluster_of(monkeypatch, {"CPU": 8.0, "GPU": 1.0})
    assert predict_in_process(cfg, 10, 100) == (False, "GPU actors")
    cluster_of(monkeypatch, NODE)
    assert predict_in_process(cfg, None, AUTO_IN_PROCESS_BYTES)[0]
    cluster_of(monkeypatch, NODE, NODE)
    assert not predict_in_process(cfg, None, AUTO_IN_PROCESS_BYTES + 1)[0]  # rows unknown
    assert predict_in_process(cfg, None, AUTO_IN_PROCESS_BYTES)[0]


def test_training_auto_trains_in_process_on_one_node(nothing_there, monkeypatch):
    head = SimpleNamespace(in_dim=384)
    cfg = load_config({"cache": "c"})
    rows = AUTO_LOCAL_BYTES // (384 * 4) * 3  # 1.5 GiB: DDP before, for no gain on one node
    workers, why = resolve_workers(cfg, head, rows)
    assert workers == 0 and why.startswith("one node with ") and "fit in memory" in why
    monkeypatch.setattr(sys.modules["raycache._compute.workers"], "memory",
                        lambda available=False: 2 * 2**30)
    assert "are streamed: they do not fit in memory" in resolve_workers(cfg, head, rows)[1]
    cluster_of(monkeypatch, NODE)
    assert resolve_workers(cfg, head, rows) == (
        0, "one node with 2 CPUs; 1.51 GiB of features are streamed: they do not fit in memory")
    cluster_of(monkeypatch, NODE, NODE, {"GPU": 0.0})  # a node with no CPU runs no worker
    workers, why = resolve_workers(cfg, head, rows)
    assert (workers, why) == (2, "one per node of a Ray cluster of 3 nodes (4 CPUs)")
    pinned = load_config({"cache": "c", "resources": {"num_workers": 3}})
    assert resolve_workers(pinned, head, 10) == (3, "resources.num_workers: 3")
    gpu = load_config({"cache": "c", "resources": {"use_gpu": True}})
    assert resolve_workers(gpu, head, 1000)[0] == 0  # small: this machine's GPU


@pytest.mark.ray
def test_a_named_cluster_is_looked_up_in_its_gcs(ray_session, monkeypatch):
    """RAY_ADDRESS names a running cluster: its nodes are read from its GCS without joining."""
    address = ray_session.get_runtime_context().gcs_address
    monkeypatch.setattr(ray_session, "is_initialized", lambda: False)
    monkeypatch.setenv("RAY_ADDRESS", address)
    found = where.look()
    assert found is not None and found.address == address
    assert [n["CPU"] for n in found.nodes] == [4.0]  # the session's one node, 4 CPUs
    assert where.look(apart=True) == found  # asked from a child process: the same
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")  # Ray Client: not asked
    assert where.look() == Cluster((), "ray://head:10001")


def test_a_named_clusters_look_up_runs_ahead_on_a_thread_and_answers_the_same(nothing_there,
                                                                              monkeypatch):
    """A fill starts the GCS look-up (importing Ray's client: ~0.5 s) beside its plan."""
    import threading

    assert where.look_ahead() is where.look  # nothing named: nothing to start
    asked = []

    def gcs(address, apart=False):
        assert apart  # from a child process: the plan keeps this one's GIL
        asked.append(threading.current_thread().name)
        return (NODE,)

    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    monkeypatch.setattr(where, "_gcs_nodes", gcs)
    answer = where.look_ahead()
    assert answer() == answer() == Cluster((NODE,), "10.0.0.1:6379")
    assert len(asked) == 1 and asked[0].startswith("raycache-where"), asked
    assert in_process(fill_cfg(), MILLION, answer) == (
        True, "a Ray cluster of one node (2 CPUs): actors would share its cores")


def test_a_job_starts_a_ray_of_its_own_unless_ray_address_names_one(monkeypatch):
    """`ray.init()` with no address joins any cluster `ray start` left on the machine (a fill
    then hung, or crashed sizing its pool on a cluster of no CPUs, and handed it the store's
    credentials): without RAY_ADDRESS the job starts its own Ray ("local")."""
    import ray

    from raycache._compute import cluster

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert where.ray_address() == "local"
    monkeypatch.setenv("RAY_ADDRESS", "")  # as `env RAY_ADDRESS= ...` leaves it: unset
    assert where.ray_address() == "local"
    for named in ("10.0.0.1:6379", "auto", "ray://head:10001"):  # joined as before
        monkeypatch.setenv("RAY_ADDRESS", named)
        assert where.ray_address() == named
    started: list = []
    monkeypatch.setattr(ray, "init", lambda **kw: started.append(kw.get("address")))
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.delenv("RAY_ADDRESS")
    cluster.connect(progress=False)
    monkeypatch.setenv("RAY_ADDRESS", "auto")  # under `ray job submit`
    cluster.connect(progress=False)
    assert started == ["local", "auto"]
    monkeypatch.setattr(ray, "is_initialized", lambda: True)  # the tests' in-process Ray:
    cluster.connect(progress=False)  # used as it is
    assert started == ["local", "auto"]


def test_a_cluster_with_no_cpus_is_named_not_a_crash_sizing_the_pool():
    from raycache import ConfigError
    from raycache._compute.pool import size_pool
    from raycache._compute.pool_config import PoolConfig

    for nodes in ([{"memory": 8e9}], [{"CPU": 0.0, "GPU": 0.0}, {"CPU": 0.0}], []):
        for cfg in (PoolConfig(), PoolConfig(num_gpus=0), PoolConfig(num_cpus=1)):
            with pytest.raises(ConfigError, match=r"the Ray cluster has no CPUs: the cluster "
                                                  r"has 0 CPUs.*ray start --num-cpus.*"
                                                  r"RAY_ADDRESS"):
                size_pool(cfg, nodes, 10)
    # an autoscaling cluster's head often has no CPUs: one actor asked for, nodes on demand
    pool = size_pool(PoolConfig(num_gpus=0), [{"CPU": 0.0}], 10, autoscaling=True)
    assert (pool.actors, pool.cpus) == (1, 1.0)

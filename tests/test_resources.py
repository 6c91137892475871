"""The encoder pool is sized from the cluster, and a pool the cluster cannot hold is refused
before work starts, with the value, what the cluster has and the fix."""

import pytest

from raycache import ConfigError
from raycache._compute.pool import READ_CPUS, size_pool
from raycache._encoders.batching import Batching
from raycache._fill.config import FillConfig
from raycache._fill.plan import load_config as load_fill


def cfg(**over) -> FillConfig:
    """A fill config with flat pool keys, as configs before the `pool:` group wrote them."""
    return load_fill({"name": "x", "source": {"path": "data.parquet"}, "encoders": [
        {"name": "m", "kind": "torch", "input": "f", "factory": "toy_encoders:projection"}],
        **over})


def ask(**over):
    return cfg(**over).pool


def test_auto_on_a_two_cpu_machine_runs_two_single_threaded_actors():
    pool = size_pool(ask(), [{"CPU": 2.0}])
    assert (pool.actors, pool.threads, pool.gpus) == (2, 1, 0)
    assert pool.actors * pool.cpus + READ_CPUS <= 2.0  # the reads still run


def test_auto_on_a_big_node_runs_several_multi_threaded_actors():
    pool = size_pool(ask(), [{"CPU": 16.0}, {"CPU": 16.0}])
    assert (pool.actors, pool.threads) == (8, 4)
    assert 4 * pool.cpus + READ_CPUS <= 16.0


def test_auto_never_starts_more_actors_than_there_are_blocks():
    assert size_pool(ask(), [{"CPU": 16.0}], blocks=2).actors == 2


def test_fractional_gpus_put_several_actors_on_one_gpu():
    pool = size_pool(ask(num_gpus=0.25), [{"CPU": 16.0, "GPU": 1.0}])
    assert (pool.actors, pool.gpus, pool.device) == (4, 0.25, "cuda")
    assert pool.batching == Batching(16384, 262144) == Batching.on(gpu=True)
    assert pool.prepare_actors >= 8


def test_gpus_asked_of_a_cluster_without_gpus_is_refused():
    with pytest.raises(ConfigError) as err:
        size_pool(ask(num_gpus=1), [{"CPU": 2.0}])
    text = str(err.value)
    assert "pool.num_gpus=1" in text and "0 GPUs" in text and "set pool.num_gpus: 0" in text


def test_autoscaling_clusters_may_have_no_gpu_yet():
    pool = size_pool(ask(num_gpus=1), [{"CPU": 2.0}], autoscaling=True)
    assert pool.actors == 1 and pool.gpus == 1


def test_a_pool_larger_than_the_cluster_is_refused_with_the_fix():
    with pytest.raises(ConfigError) as err:
        size_pool(ask(concurrency=2, num_cpus=1.0), [{"CPU": 2.0}])
    text = str(err.value)
    assert "pool.concurrency=2" in text and "2 CPUs" in text and "hold 0 such actor(s)" in text
    assert "leave them at auto" in text


@pytest.mark.parametrize(("field", "value", "message"), [
    ("concurrency", "two", "pool.concurrency='two': expected a whole number >= 1, or 'auto'"),
    ("batch_size", 0, "pool.batch_size=0: expected a whole number >= 1, or 'auto'"),
    ("num_cpus", -1.0, "pool.num_cpus=-1.0: expected a number > 0, or 'auto'"),
    ("num_gpus", 1.5, "pool.num_gpus=1.5: above 1 it must be a whole number"),
])
def test_bad_pool_settings_are_config_errors(field, value, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        cfg(**{field: value})


def test_num_gpus_auto_takes_a_gpu_where_the_cluster_has_one():
    assert size_pool(ask(), [{"CPU": 8.0, "GPU": 2.0}]).gpus == 1
    assert size_pool(ask(), [{"CPU": 8.0}]).gpus == 0


def test_pool_settings_load_flat_or_grouped_and_say_where_they_are():
    flat, grouped = cfg(num_gpus=0.5, batch_size=64), cfg(pool={"num_gpus": 0.5, "batch_size": 64})
    assert flat.pool == grouped.pool and flat.pool.num_gpus == 0.5
    with pytest.raises(ConfigError, match=r"pool\.block_rows=0: expected a whole number"):
        cfg(pool={"block_rows": 0})


def test_cpu_pools_run_as_tasks_and_gpu_pools_keep_their_actors():
    """The model stage's shape on described clusters: tasks on CPU nodes (no actor pool to
    start), actors where GPUs encode (one model held on each GPU share)."""
    cpu_nodes = [{"CPU": 16.0}, {"CPU": 16.0}, {"CPU": 16.0}]
    for pool in (size_pool(ask(), cpu_nodes), size_pool(ask(concurrency=4), cpu_nodes),
                 size_pool(ask(num_gpus=0), [{"CPU": 16.0, "GPU": 1.0}] * 2)):
        assert pool.tasks and pool.describe().startswith(f"{pool.actors} encoder task(s)")
    for pool in (size_pool(ask(), [{"CPU": 16.0, "GPU": 2.0}, {"CPU": 16.0}]),
                 size_pool(ask(num_gpus=0.5), [{"CPU": 8.0, "GPU": 1.0}])):
        assert not pool.tasks and "encoder actor(s)" in pool.describe()

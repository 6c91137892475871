"""The encoder pool is sized from the cluster, and a pool the cluster cannot hold is refused
before work starts, with the value, what the cluster has and the fix."""

import pytest

from raycache._compute.pool import READ_CPUS, size_pool
from raycache._errors import ConfigError
from raycache._fill.config import FillConfig
from raycache._fill.plan import load_config as load_fill


def cfg(**over) -> FillConfig:
    return load_fill({"name": "x", "source": {"path": "data.parquet"}, "encoders": [
        {"name": "m", "kind": "torch", "input": "f", "factory": "toy_encoders:projection"}],
        **over})


def test_auto_on_a_two_cpu_machine_runs_two_single_threaded_actors():
    pool = size_pool(cfg(), [{"CPU": 2.0}])
    assert (pool.actors, pool.threads, pool.gpus) == (2, 1, 0)
    assert pool.actors * pool.cpus + READ_CPUS <= 2.0  # the reads still run


def test_auto_on_a_big_node_runs_several_multi_threaded_actors():
    pool = size_pool(cfg(), [{"CPU": 16.0}, {"CPU": 16.0}])
    assert (pool.actors, pool.threads) == (8, 4)
    assert 4 * pool.cpus + READ_CPUS <= 16.0


def test_auto_never_starts_more_actors_than_there_are_blocks():
    assert size_pool(cfg(), [{"CPU": 16.0}], blocks=2).actors == 2


def test_fractional_gpus_put_several_actors_on_one_gpu():
    pool = size_pool(cfg(num_gpus=0.25), [{"CPU": 16.0, "GPU": 1.0}])
    assert (pool.actors, pool.gpus, pool.device) == (4, 0.25, "cuda")
    assert pool.batching.max_rows == 4096 and pool.prepare_actors >= 8


def test_gpus_asked_of_a_cluster_without_gpus_is_refused():
    with pytest.raises(ConfigError) as err:
        size_pool(cfg(num_gpus=1), [{"CPU": 2.0}])
    text = str(err.value)
    assert "num_gpus=1" in text and "0 GPUs" in text and "set num_gpus: 0" in text


def test_autoscaling_clusters_may_have_no_gpu_yet():
    pool = size_pool(cfg(num_gpus=1, autoscaling=True), [{"CPU": 2.0}])
    assert pool.actors == 1 and pool.gpus == 1


def test_a_pool_larger_than_the_cluster_is_refused_with_the_fix():
    with pytest.raises(ConfigError) as err:
        size_pool(cfg(concurrency=2, num_cpus=1.0), [{"CPU": 2.0}])
    text = str(err.value)
    assert "concurrency=2" in text and "2 CPUs" in text and "hold 0 such actor(s)" in text
    assert "leave them at auto" in text


@pytest.mark.parametrize(("field", "value", "message"), [
    ("concurrency", "two", "concurrency='two': expected a whole number >= 1, or 'auto'"),
    ("batch_size", 0, "batch_size=0: expected a whole number >= 1, or 'auto'"),
    ("num_cpus", -1.0, "num_cpus=-1.0: expected a number > 0, or 'auto'"),
    ("num_gpus", 1.5, "num_gpus=1.5: above 1 it must be a whole number"),
])
def test_bad_pool_settings_are_config_errors(field, value, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        cfg(**{field: value})

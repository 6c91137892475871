"""Store faults proved by the suite: a proxy between raycache and the moto S3 server answers a
share of the requests with 503 SlowDown or 500 InternalError (S3's XML bodies), drops the
connection before or after the server saw the request, or stalls (tests/fault_proxy.py, at a
fixed seed and rate). A fill (in-process and on Ray), a streamed training run, verify and gc
each end equal to the fault-free result, or fail with raycache's StoreError and finish when run
again."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pyarrow.parquet as pq
import pytest
import s3fs

import raycache
from raycache import StoreError
from raycache._cache.store import Store
from tests.conftest import separable, toy_fill
from tests.fault_proxy import FAULTS, FaultProxy

pytestmark = [pytest.mark.s3, pytest.mark.timeout(300)]

RATE, SEED = 0.25, int(os.environ.get("RAYCACHE_FAULT_SEED", "30"))
"""A quarter of the requests faulted; the draws fixed (RAYCACHE_FAULT_SEED tries others)."""
ROWS = 600


@pytest.fixture(scope="module")
def proxy(s3_endpoint: str):
    with FaultProxy(s3_endpoint, rate=0.0, seed=SEED, stall_s=1.0) as p:
        yield p


@pytest.fixture
def faults(proxy: FaultProxy):
    """Faults on for the test (the fault-free reference runs before this is asked for)."""
    proxy.set(RATE, SEED)
    proxy.counts.clear()
    yield proxy
    proxy.set(0.0)


@pytest.fixture(scope="module")
def data(s3_endpoint: str) -> str:
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    fs.mkdir("rc-faults")
    with fs.open("rc-faults/data/a.parquet", "wb") as f:
        pq.write_table(separable(n=ROWS), f, row_group_size=100)
    return "s3://rc-faults/data/a.parquet"


def via(proxy: FaultProxy) -> dict[str, Any]:
    """fsspec options that send s3fs's requests through the proxy."""
    return {"client_kwargs": {"endpoint_url": proxy.url}}


def fill_cfg(data: str, store: str, proxy: FaultProxy, **over) -> dict:
    cfg = toy_fill(data, store, **{"rows_per_shard": 100, **over})
    cfg["store"]["options"] = via(proxy)
    cfg["source"]["options"] = via(proxy)
    return cfg


def until_done(call: Callable[[], Any], attempts: int = 6) -> tuple[Any, list[StoreError]]:
    """call() again after each StoreError (what a user does: run it again); any other error
    fails the test."""
    failed: list[StoreError] = []
    for _ in range(attempts):
        try:
            return call(), failed
        except StoreError as exc:
            failed.append(exc)
    raise AssertionError(f"still failing after {attempts} runs: {failed}")


def faulted(proxy: FaultProxy) -> int:
    """Requests the proxy faulted so far."""
    return sum(v for k, v in proxy.counts.items() if k != "passed")


def table_of(result: Any) -> Any:
    return result.cache.read_table().sort_by("id")


@pytest.fixture(scope="module")
def clean(data: str, proxy: FaultProxy, tmp_path_factory) -> Any:
    """The fault-free fill's cache table, in a local store."""
    store = str(tmp_path_factory.mktemp("clean") / "store")
    return table_of(raycache.fill(fill_cfg(data, store, proxy, in_process=True)))


def test_an_in_process_fill_through_faults_equals_a_clean_fill(data, clean, faults):
    cfg = fill_cfg(data, "s3://rc-faults/in-process", faults, in_process=True)
    result, failed = until_done(lambda: raycache.fill(cfg))
    assert faulted(faults) >= 5, faults.counts
    assert table_of(result).equals(clean), failed
    faults.set(0.0)
    assert raycache.verify(raycache.open_cache("toy", "s3://rc-faults/in-process",
                                               **via(faults))).ok


@pytest.mark.ray
def test_a_fill_on_ray_through_faults_equals_a_clean_fill(data, clean, faults, ray_session):
    cfg = fill_cfg(data, "s3://rc-faults/on-ray", faults, in_process=False)
    result, failed = until_done(lambda: raycache.fill(cfg))
    assert "in-process" not in result.pool and faulted(faults) >= 5, faults.counts
    assert table_of(result).equals(clean), failed


def test_streamed_training_verify_and_gc_through_faults(data, proxy):
    store = "s3://rc-faults/train"
    proxy.set(0.0)
    old = raycache.fill(fill_cfg(data, store, proxy, in_process=True, rows_per_shard=200))
    new = raycache.fill(fill_cfg(data, store, proxy, in_process=True))
    train = {"cache": "toy", "store": {"uri": store, "options": via(proxy)}, "epochs": 2,
             "num_workers": 0, "placement": "stream", "batch_size": 64, "progress": False}
    want = raycache.train({**train, "run_name": "clean"})
    proxy.set(RATE, SEED)
    proxy.counts.clear()
    got, failed = until_done(lambda: raycache.train({**train, "run_name": "faults"}))
    assert faulted(proxy) >= 5, proxy.counts
    for key in ("train_loss", "val_loss", "val_acc"):
        assert got.metrics[key] == want.metrics[key], (key, failed)
    report, _ = until_done(lambda: raycache.verify(raycache.open_cache("toy", store,
                                                                       **via(proxy))))
    assert report.ok and report.rows == ROWS and report.shards == 6
    result, _ = until_done(lambda: raycache.gc(Store(store, via(proxy)), retain=1,
                                               delete=True))
    proxy.set(0.0)
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    assert not fs.exists(f"rc-faults/train/toy/{old.cache.fingerprint}")  # gone, whole
    assert raycache.verify(raycache.open_cache("toy", store, new.cache.fingerprint,
                                               **via(proxy))).ok


def test_a_fill_the_store_fails_stops_with_a_store_error_and_resumes(data, clean, proxy):
    """Faults beyond the retries: the fill stops with raycache's StoreError (never a
    library's own error), and, run again with the store healthy, resumes and commits the
    same cache."""
    cfg = fill_cfg(data, "s3://rc-faults/beyond", proxy, in_process=True)
    for side in (cfg["store"], cfg["source"]):  # what a user can set: fewer retries, faster
        side["options"]["config_kwargs"] = {"retries": {"max_attempts": 2}}
    proxy.faults = ("slowdown", "internal", "drop", "drop_after")
    proxy.set(0.9, SEED, start_on=".parquet.json")  # once a shard is recorded
    try:
        with pytest.raises(StoreError) as err:
            raycache.fill(cfg)
    finally:
        proxy.set(0.0)
        proxy.faults = FAULTS
    assert "rc-faults" in str(err.value) and "Run the same command again" in str(err.value) \
        or "run again" in str(err.value), err.value
    result = raycache.fill(cfg)
    assert result.resumed_rows > 0 and result.encoded_rows < ROWS
    assert table_of(result).equals(clean)

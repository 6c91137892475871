"""Faults during a fill, with real processes killed: the driver's process group and an encoder
task's worker; and the state a writer killed between its shard and its record leaves.
Each ends with a re-run that commits a complete, duplicate-free cache and encodes only what
was missing."""

import hashlib
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import raycache
from raycache import RaycacheError
from raycache._compute.pool import nodes, size_pool
from raycache._fill.encode import build_pipeline
from raycache._fill.plan import load_config as load_fill
from raycache._fill.plan import plan
from raycache._source import files as sources
from tests.conftest import separable, toy_fill
from tests.faults import Driver, kill_once_running, wait_for, when

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(600)]

ROWS = 600


@pytest.fixture
def source(tmp_path) -> Path:
    (tmp_path / "source").mkdir()
    pq.write_table(separable(n=ROWS), tmp_path / "source" / "a.parquet")
    return tmp_path / "source"


def slow_fill(source: Path, store: str, delay: float = 0.3) -> dict:
    """50-row shards, each encoder call sleeping `delay`: a fill that takes a while."""
    cfg = toy_fill(str(source), store, rows_per_shard=50, in_process=False)  # on Ray Data
    cfg["encoders"][0].update(factory="toy_encoders:slow_projection",
                              kwargs={"in_dim": 8, "out_dim": 16, "delay": delay})
    return cfg


def records(store: str) -> list[Path]:
    return list(Path(store).glob("toy/*/_progress/*.json"))


def check_complete(result, resumed_at_least: int) -> None:
    table = result.cache.read_table()
    keys = table.column("id").to_pylist()
    assert len(keys) == ROWS and len(set(keys)) == ROWS  # every key once
    assert result.resumed_rows >= resumed_at_least
    assert result.encoded_rows == ROWS - result.resumed_rows  # only what was missing


def test_driver_killed_mid_fill_resumes_at_the_shard(ray_session, source, tmp_path):
    store = str(tmp_path / "store")
    code = f"import raycache; raycache.fill({slow_fill(source, store)!r})"
    driver = Driver(code, log=tmp_path / "driver.log")
    try:
        assert wait_for(lambda: len(records(store)) >= 3, timeout=300), \
            (tmp_path / "driver.log").read_text()[-3000:]
    finally:
        driver.kill()
    assert not list(Path(store).rglob("manifest.json"))
    left = len(records(store))
    result = raycache.fill(slow_fill(source, store))  # the same config: the same fingerprint
    assert not result.hit and "resumed" in result.summary()
    check_complete(result, resumed_at_least=50 * min(left, 3))


def test_encoder_worker_killed_mid_fill(ray_session, source, tmp_path):
    store = str(tmp_path / "store")
    # on CPUs the encoder runs in chain_task tasks (prepare, encode, write): the worker process
    # running one is killed, with the stages and the model it kept
    killer = when(lambda: len(records(store)) >= 2, lambda: kill_once_running("chain_task"))
    try:
        result = raycache.fill(slow_fill(source, store))
    except RaycacheError:  # Ray gave up on the actor: the fill failed clearly, nothing committed
        assert not list(Path(store).rglob("manifest.json"))
        result = raycache.fill(slow_fill(source, store))
    killer.join(timeout=60)
    assert killer.result, "no encoder task's worker was found to kill"
    check_complete(result, resumed_at_least=0)


def test_a_shard_written_but_never_recorded_is_encoded_again(ray_session, source, tmp_path):
    cfg = load_fill(toy_fill(str(source), str(tmp_path / "store"), rows_per_shard=50))
    p = plan(cfg)
    [unit], _ = sources.plan_units(p.files, p.format, {}, cfg.rows_per_shard)
    first_200 = sources.Unit(unit.file, unit.groups, 0, ROWS, done=(sources.Span(200, ROWS),))
    list(build_pipeline(p, [first_200], size_pool(cfg.pool, nodes())).iter_batches())
    progress = sorted(Path(p.dir, "_progress").glob("*.json"))
    assert len(progress) == 4
    # what a writer killed between its shard and its record leaves: the shard, no record
    orphan = json.loads(progress[0].read_text())
    progress[0].unlink()
    result = raycache.fill(cfg)
    check_complete(result, resumed_at_least=150)
    assert result.resumed_rows == 150 and result.encoded_rows == 450
    listed = [s.path for s in result.cache.manifest.shards]
    assert listed.count(orphan["path"]) == 1  # encoded again under the same name, listed once
    for s in result.cache.manifest.shards:
        blob = Path(p.dir, s.path).read_bytes()
        assert hashlib.sha256(blob).hexdigest() == s.sha256 and len(blob) == s.bytes



@pytest.mark.s3
def test_s3_server_stopped_mid_fill_fails_clearly_and_resumes(ray_session, source, tmp_path):
    """A moto server process of its own, SIGSTOPped mid-fill (a hung S3 endpoint: requests time
    out), then SIGCONTed with everything it held."""
    import signal
    import socket
    import subprocess
    import sys

    import s3fs

    from raycache import StoreError
    from tests.conftest import free_port

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                               "-p", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        def listening() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        assert wait_for(listening, 60)
        options = {"client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}"},
                   "config_kwargs": {"connect_timeout": 2, "read_timeout": 4,
                                     "retries": {"max_attempts": 2}}}
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
        fs.mkdir("rc-stopped")
        cfg = slow_fill(source, "s3://rc-stopped/caches", delay=0.5)
        cfg["store"].update(options=options, timeout_s=30)  # a hung request fails in 30 s

        def s3_records() -> int:
            fs.invalidate_cache()
            return len(fs.glob("rc-stopped/caches/toy/*/_progress/*.json"))

        stopper = when(lambda: s3_records() >= 2,
                       lambda: server.send_signal(signal.SIGSTOP) or True)
        with pytest.raises(StoreError) as err:
            raycache.fill(cfg)
        stopper.join(timeout=60)
        assert stopper.result, "the fill ended before the server was stopped"
        assert "s3://rc-stopped/caches" in str(err.value)

        server.send_signal(signal.SIGCONT)  # back, with what it held
        assert not fs.glob("rc-stopped/caches/**/manifest.json")
        left = s3_records()
        assert left >= 2
        result = raycache.fill(cfg)
        assert result.resumed_rows >= 50 * 2 and "resumed" in result.summary()
        check_complete(result, resumed_at_least=50 * 2)
    finally:
        server.send_signal(signal.SIGCONT)
        server.kill()
        server.wait(timeout=30)

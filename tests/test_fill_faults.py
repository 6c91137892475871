"""Faults during a fill, with real processes killed: the driver's process group and an encoder
actor; and the state a writer killed between its shard and its record leaves.
Each ends with a re-run that commits a complete, duplicate-free cache and encodes only what
was missing."""

import hashlib
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import raycache
from raycache import sources
from raycache.config import FillConfig, load
from raycache.errors import RaycacheError
from raycache.fill import build_pipeline, plan
from raycache.resources import nodes, size_pool
from tests.conftest import separable, toy_fill
from tests.faults import Driver, kill_matching, wait_for, when

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(600)]

ROWS = 600


@pytest.fixture
def source(tmp_path) -> Path:
    (tmp_path / "source").mkdir()
    pq.write_table(separable(n=ROWS), tmp_path / "source" / "a.parquet")
    return tmp_path / "source"


def slow_fill(source: Path, store: str, delay: float = 0.3) -> dict:
    """50-row shards, each encoder call sleeping `delay`: a fill that takes a while."""
    cfg = toy_fill(str(source), store, rows_per_shard=50)
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


def test_encoder_actor_killed_mid_fill(ray_session, source, tmp_path):
    store = str(tmp_path / "store")
    killer = when(lambda: len(records(store)) >= 2, lambda: kill_matching("EncodeActor"))
    try:
        result = raycache.fill(slow_fill(source, store))
    except RaycacheError:  # Ray gave up on the actor: the fill failed clearly, nothing committed
        assert not list(Path(store).rglob("manifest.json"))
        result = raycache.fill(slow_fill(source, store))
    killer.join(timeout=60)
    assert killer.result, "no encoder actor was found to kill"
    check_complete(result, resumed_at_least=0)


def test_a_shard_written_but_never_recorded_is_encoded_again(ray_session, source, tmp_path):
    cfg = load(FillConfig, toy_fill(str(source), str(tmp_path / "store"), rows_per_shard=50))
    p = plan(cfg)
    [unit], _ = sources.plan_units(p.files, p.format, {}, cfg.rows_per_shard)
    first_200 = sources.Unit(unit.file, unit.groups, 0, ROWS, done=((200, ROWS),))
    list(build_pipeline(p, [first_200], size_pool(cfg, nodes())).iter_batches())
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

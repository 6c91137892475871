"""Training on a shard that is missing or truncated fails with a CorruptShard that names the
shard and the fix (raycache repair), in memory and streamed, checked or not: never a bare
FileNotFoundError or ArrowInvalid (no Ray: in this process)."""

import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import raycache
from raycache import CorruptShard
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def cache(tmp_path) -> raycache.Cache:
    (tmp_path / "source").mkdir()
    pq.write_table(separable(n=120), tmp_path / "source" / "a.parquet")
    return raycache.fill(toy_fill(str(tmp_path / "source"), str(tmp_path / "store"),
                                  rows_per_shard=40, in_process=True)).cache


def train(cache: raycache.Cache, **over) -> raycache.TrainResult:
    return raycache.train({"cache": "toy", "store": {"uri": cache.store.uri}, "epochs": 2,
                           "num_workers": 0, "batch_size": 16, "progress": False, **over})


def damage(cache: raycache.Cache, how: str) -> Path:
    path = Path(cache.shard_paths()[-1])
    if how == "missing":
        os.remove(path)
    else:
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return path


@pytest.mark.parametrize("placement", ["cpu", "stream"])
@pytest.mark.parametrize("verify", [True, False])
@pytest.mark.parametrize("how", ["missing", "truncated"])
def test_training_on_a_damaged_shard_names_it_and_the_fix(cache, placement, verify, how,
                                                          monkeypatch):
    import raycache._train.defaults as defaults

    monkeypatch.setattr(defaults, "SAMPLE_ROWS", 10)  # lr's sample: the first shard alone
    path = damage(cache, how)  # the last: read by training's own reads
    with pytest.raises(CorruptShard, match="raycache repair toy") as err:
        train(cache, placement=placement, verify=verify)
    assert str(path) in str(err.value)
    assert err.value.cache == f"toy/{cache.fingerprint}"


def test_reading_unchecked_names_a_missing_shard(cache):
    damage(cache, "missing")
    with pytest.raises(CorruptShard, match="missing"):
        cache.read_table(verify=False)

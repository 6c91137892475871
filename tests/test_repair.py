"""`raycache repair` re-encodes only the bad or missing shards of a committed cache from its
unchanged source, and commits a corrected manifest; a changed source is refused."""

import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import raycache
from raycache import RaycacheError
from raycache._cli import main
from raycache._upkeep.verify import verify
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(120)


def embeddings(cache) -> dict[str, np.ndarray]:
    t = cache.read_table(columns=["id", "proj"])
    return dict(zip(t.column("id").to_pylist(),
                    np.stack(t.column("proj").to_numpy(zero_copy_only=False)), strict=True))


@pytest.fixture
def cache(tmp_path):
    (tmp_path / "src").mkdir()
    pq.write_table(separable(n=600), tmp_path / "src" / "a.parquet")
    return raycache.fill(toy_fill(str(tmp_path / "src"), str(tmp_path / "store"),
                                  rows_per_shard=150, in_process=True)).cache


def test_repair_re_encodes_only_the_bad_and_missing_shards(cache, tmp_path, capsys):
    want = embeddings(cache)
    paths = cache.shard_paths()
    with open(paths[1], "r+b") as f:  # a flipped byte
        f.seek(300)
        byte = f.read(1)[0]
        f.seek(300)
        f.write(bytes([byte ^ 0x01]))
    os.remove(paths[2])  # a lost shard
    assert sorted(verify(cache).bad) == sorted(s.path for s in cache.manifest.shards[1:3])

    assert main(["repair", "toy", "--store", str(tmp_path / "store")]) == 0
    out = capsys.readouterr().out
    assert "300 encoded" in out  # two shards of 150 rows, not the whole cache
    fixed = raycache.open_cache("toy", str(tmp_path / "store"))
    assert fixed.fingerprint == cache.fingerprint and verify(fixed).ok
    assert verify(fixed).stray == {}  # no old shard list or progress record left
    got = embeddings(fixed)
    assert got.keys() == want.keys() and all(np.allclose(got[k], want[k]) for k in got)
    assert main(["verify", "toy", "--store", str(tmp_path / "store")]) == 0


def test_a_healthy_cache_is_left_alone(cache, tmp_path):
    manifest = Path(cache.dir) / "manifest.json"
    before = manifest.read_bytes()
    result = raycache.repair("toy", str(tmp_path / "store"), in_process=True)
    assert result.hit and manifest.read_bytes() == before


def test_repair_refuses_a_changed_source(cache, tmp_path):
    os.remove(cache.shard_paths()[0])
    pq.write_table(separable(n=600, seed=1), tmp_path / "src" / "a.parquet")
    with pytest.raises(RaycacheError, match="changed since the fill.*Fill the cache again"):
        raycache.repair("toy", str(tmp_path / "store"), in_process=True)
    assert not verify(cache).ok  # nothing was committed over it

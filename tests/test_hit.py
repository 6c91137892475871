"""A warm fill (a hit) reads the manifest only: no shard is listed, opened or stat'ed."""

import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

import raycache
from raycache._train.driver.checks import load_config as load_train
from tests.conftest import separable, toy_fill

SPIED = ("ls", "_open", "info", "exists", "find", "glob", "cat_file", "isdir", "isfile")


def test_a_hit_touches_nothing_of_the_store_but_the_manifest(tmp_path, monkeypatch):
    pq.write_table(separable(n=120), tmp_path / "a.parquet")
    store = tmp_path / "store"
    cfg = toy_fill(str(tmp_path / "a.parquet"), str(store), rows_per_shard=20,
                   in_process=True)
    assert len(raycache.fill(cfg).cache.manifest.shards) == 6

    touched: list[tuple[str, str]] = []
    for name in SPIED:
        real = getattr(LocalFileSystem, name)

        def spy(self, path, *args, _real=real, _name=name, **kwargs):
            touched.append((_name, str(path)))
            return _real(self, path, *args, **kwargs)

        monkeypatch.setattr(LocalFileSystem, name, spy)
    hit = raycache.fill(cfg)
    assert hit.hit and hit.cache.manifest.rows == 120
    in_store = [(op, p) for op, p in touched if str(store) in p]
    assert in_store, "the spy saw no store access; the hit must read the manifest"
    assert [(op, p) for op, p in in_store if not p.endswith("/manifest.json")] == []
    hit.cache.read_table(limit=1)  # the spy does see a shard read
    assert any("/shards/" in p for _, p in touched)


def test_training_takes_its_class_counts_from_the_manifest(tmp_path, monkeypatch):
    from raycache._cache.store import Store
    from raycache._train.driver.checks import check

    pq.write_table(separable(n=120), tmp_path / "a.parquet")
    store = tmp_path / "store"
    cache = raycache.fill(toy_fill(str(tmp_path / "a.parquet"), str(store),
                                   rows_per_shard=20, in_process=True)).cache
    want = cache.read_table(columns=["label"]).column("label").to_numpy()
    opened: list[str] = []
    real = LocalFileSystem._open
    monkeypatch.setattr(LocalFileSystem, "_open", lambda self, path, *a, **k: opened.append(
        str(path)) or real(self, path, *a, **k))
    _, head, counts = check(load_train({"cache": "toy"}), Store(str(store)))
    assert counts.tolist() == [int((want == c).sum()) for c in range(3)]
    assert head.num_classes == 3
    assert not [p for p in opened if "/shards/" in p]  # no shard read on the driver

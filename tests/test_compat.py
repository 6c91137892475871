"""Caches and checkpoints of earlier raycache versions still open, train, resume and predict:
manifests of formats 1 to 4 (3 on with its shard list apart; shards with nested-list
embeddings before format 4, packed in 4; format 5, versions sharing shards, in
test_versions*), an older EncoderConfig saved flat in a manifest, head.json versions 1 and 2,
and progress records as earlier fills wrote them; all built here from their JSON forms, over
small Parquet shards written with pyarrow."""

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import toy_encoders

import raycache
from raycache._cache.finding import open_cache
from raycache._cache.records import RowRange, ShardRecord
from raycache._cache.vectors import pack
from raycache._heads.loaded import load_head
from tests.conftest import separable, toy_fill

ROWS, PER_SHARD, DIM = 300, 100, 16
ENCODER = {"name": "proj", "kind": "torch", "input": "features",
           "factory": "toy_encoders:projection", "kwargs": {"in_dim": 8, "out_dim": DIM}}
"""The encoder config as the first versions saved it flat (no precision, no trainable)."""


def weights_digest() -> str:
    from raycache._encoders import ENCODERS
    from raycache._encoders.batching import Batching
    from raycache._encoders.config import EncoderConfig

    return ENCODERS["torch"].load(EncoderConfig(**ENCODER), "cpu", Batching()).weights_digest()


def rows() -> tuple[pa.Table, np.ndarray]:
    """The source rows and their embeddings by the toy projection."""
    table = separable(ROWS)
    feats = np.stack(table.column("features").to_numpy(zero_copy_only=False)).astype(np.float32)
    with torch.no_grad():
        emb = toy_encoders.projection(8, DIM)(torch.from_numpy(feats)).numpy()
    return table, emb


def write_cache(store: Path, version: int, digest: str) -> dict:
    """A committed cache as raycache wrote it in manifest format `version`; its manifest."""
    table, emb = rows()
    name, fingerprint = f"old{version}", f"{version}" * 24
    folder = store / name / fingerprint
    (folder / "shards").mkdir(parents=True)
    uri, block = "/data/source/a.parquet", "b" * 16
    shards = []
    for start in range(0, ROWS, PER_SHARD):
        part = table.slice(start, PER_SHARD)
        data = pa.table({
            "id": part.column("id"), "label": part.column("label"), "name": part.column("name"),
            "proj": pa.FixedSizeListArray.from_arrays(
                pa.array(emb[start:start + PER_SHARD].reshape(-1)), DIM)})
        if version >= 4:  # embeddings packed, one fixed-size binary value a row
            data = pack(data, ["proj"])
        path = f"shards/part-{block}-{start:010d}.parquet"
        pq.write_table(data, folder / path)
        blob = (folder / path).read_bytes()
        entry = {"path": path, "rows": part.num_rows, "bytes": len(blob),
                 "sha256": hashlib.sha256(blob).hexdigest(), "source": uri}
        if version >= 2:
            entry["ranges"] = [[block, start, start + part.num_rows]]
        shards.append(entry)
    encoder = {"name": "proj", "kind": "torch", "input": "features", "dim": DIM,
               "dtype": "float32", "weights_digest": digest}
    if version >= 3:
        encoder.update(identity="i" * 64, trainable=False, column="")
    manifest = {
        "name": name, "fingerprint": fingerprint, "format_version": version,
        "inputs": {"source": {"files": [{"uri": uri, "size": 1, "version": "1"}],
                              "format": "parquet", "key": "id", "labels": ["label", "name"]},
                   "encoders": {"proj": {"weights_digest": digest}},
                   "rows_per_shard": PER_SHARD},
        "encoders": [encoder], "key_column": "id", "label_columns": ["label", "name"],
        "label_types": {"label": "int64", "name": "string"},
        "created": f"2024-0{version}-01T00:00:00.000+00:00", "fill_seconds": 1.5,
        "extra": {} if version == 1 else {"encoder_configs": {"proj": ENCODER}},
    }
    if version < 3:
        manifest["shards"] = shards
    else:  # the shard list in its own object, named by its digest
        listing = (json.dumps(shards, sort_keys=True, separators=(",", ":")) + "\n").encode()
        sha = hashlib.sha256(listing).hexdigest()
        (folder / f"shards-{sha[:16]}.json").write_bytes(listing)
        labels = table.column("label").to_numpy()
        manifest.update(
            shard_list={"path": f"shards-{sha[:16]}.json", "bytes": len(listing), "sha256": sha},
            totals={"rows": ROWS, "bytes": sum(s["bytes"] for s in shards),
                    "shards": len(shards)},
            label_stats={"label": {"nulls": 0, "min": int(labels.min()),
                                   "max": int(labels.max()),
                                   "counts": np.bincount(labels).tolist()}})
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return manifest


@pytest.fixture(scope="module")
def old(tmp_path_factory):
    """A store holding one cache of each manifest format, and the toy encoder's digest."""
    store = tmp_path_factory.mktemp("compat") / "store"
    digest = weights_digest()
    for version in (1, 2, 3, 4):
        write_cache(store, version, digest)
    return store, digest


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_old_manifests_open_and_read(old, version):
    store, _ = old
    cache = open_cache(f"old{version}", str(store))
    m = cache.manifest
    assert m.format_version == version and m.rows == ROWS and m.shard_count == 3
    assert [s.ranges for s in m.shards][0] == (
        () if version == 1 else (RowRange("b" * 16, 0, PER_SHARD),))
    df = cache.to_pandas()
    table, emb = rows()
    assert df["id"].tolist() == table.column("id").to_pylist()
    np.testing.assert_allclose(np.stack(df["proj"].to_numpy()), emb, rtol=1e-6)
    assert m.encoder("proj").dim == DIM
    if version > 1:  # the older EncoderConfig, flat, fills in today's defaults
        from raycache._encoders.config import EncoderConfig

        cfg = EncoderConfig(**m.extra["encoder_configs"]["proj"])
        assert cfg.precision == "float32" and not cfg.trainable


def train(store: Path, version: int, epochs: int = 2):
    return raycache.train({"cache": f"old{version}", "store": {"uri": str(store)},
                           "epochs": epochs, "lr": 0.05, "batch_size": 32, "num_workers": 0,
                           "progress": False})


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_old_caches_train_in_process(old, version):
    store, _ = old
    run = train(store, version)
    assert run.spec.head.num_classes == 3 and len(run.history) == 2
    assert run.metrics["val_acc"] > 0.8


def head_json(checkpoint: Path, version: int, folder: Path) -> Path:
    """A copy of a checkpoint whose head.json is as raycache wrote it in `version`: 1 knew
    no objective, out_dim, normalize or trainable encoders; and whose weights are, as both
    wrote them, head.pt (a torch pickle) rather than head.safetensors."""
    import torch
    from safetensors.torch import load_file

    shutil.copytree(checkpoint, folder)
    torch.save(load_file(folder / "head.safetensors"), folder / "head.pt")
    (folder / "head.safetensors").unlink()
    saved = json.loads((folder / "head.json").read_text())
    head = {k: v for k, v in saved["head"].items() if k != "trainable"}
    if version == 1:
        head = {k: v for k, v in head.items() if k not in ("objective", "out_dim", "normalize")}
    head["format_version"] = version
    (folder / "head.json").write_text(json.dumps({**saved, "head": head}, indent=2))
    return folder


@pytest.mark.parametrize("version", [1, 2])
def test_old_head_json_loads_and_predicts(old, tmp_path, version):
    store, _ = old
    run = train(store, 3, epochs=2)
    folder = head_json(Path(run.checkpoint), version, tmp_path / f"head-v{version}")
    head = load_head(str(folder), trust_code=["toy_encoders:"])  # the manifest was hand-made
    assert head.spec.objective == "classification" and head.spec.width == 3
    table, emb = rows()
    labels = table.column("label").to_numpy()
    assert (head.predict_embeddings(emb) == labels).mean() > 0.8
    raw = table.column("features").to_pylist()  # the encoder run live, its weights checked
    assert (head.predict(raw) == labels).mean() > 0.8


def test_a_fill_resumes_from_progress_records_as_earlier_versions_wrote_them(tmp_path):
    """Records with only path, rows, bytes, sha256, ranges and dims (no reused, encoded or
    times) are kept: the fill encodes only the rows they do not hold."""
    source = tmp_path / "source"
    source.mkdir()
    pq.write_table(separable(400), source / "a.parquet")
    cfg = toy_fill(str(source), str(tmp_path / "store"), rows_per_shard=100)
    first = raycache.fill(cfg)
    cache = first.cache
    records = []
    progress = Path(cache.dir) / "_progress"
    progress.mkdir()
    for s in list(cache.manifest.shards)[:3]:
        rec = {"path": s.path, "rows": s.rows, "bytes": s.bytes, "sha256": s.sha256,
               "dims": {"proj": 16},
               "ranges": [[*r.to_json(), str(source / "a.parquet"), 400] for r in s.ranges]}
        assert ShardRecord.from_json(rec).to_json() == rec  # the JSON form, unchanged
        records.append(rec)
        name = s.path.rsplit("/", 1)[1]
        (progress / f"{name}.json").write_text(json.dumps(rec, indent=2, sort_keys=True))
    for f in Path(cache.dir).glob("shards-*.json"):
        f.unlink()
    (Path(cache.dir) / "manifest.json").unlink()
    again = raycache.fill(cfg)
    assert not again.hit and again.resumed_rows == 300 and again.encoded_rows == 100
    assert again.cache.manifest.shards == cache.manifest.shards
    assert again.cache.to_pandas()["id"].tolist() == cache.to_pandas()["id"].tolist()


def test_shards_are_written_in_the_saved_form(tmp_path):
    """What a fill writes today: the fingerprint in each shard's Parquet metadata under its old
    key; the embedding packed (format 4: one fixed-size binary value a row, the numbers'
    little-endian bytes, the field's metadata naming their type), which raycache's readers, and
    numpy by hand, turn back into the fixed-size list of floats earlier versions wrote."""
    pq.write_table(separable(n=60), tmp_path / "a.parquet")
    cache = raycache.fill(toy_fill(str(tmp_path / "a.parquet"), str(tmp_path / "store"),
                                   in_process=True)).cache
    assert cache.manifest.format_version == 5
    path = tmp_path / "store" / "toy" / cache.manifest.fingerprint / cache.manifest.shards[0].path
    raw = pq.read_table(path)
    assert raw.schema.metadata[b"raycache.fingerprint"] == cache.manifest.fingerprint.encode()
    field = raw.schema.field("proj")
    assert field.type == pa.binary(DIM * 4) and field.metadata == {b"raycache.vector": b"float32"}
    by_hand = np.frombuffer(raw.column("proj").combine_chunks().buffers()[1], "<f4")
    read = cache.read_table(columns=["proj"], limit=raw.num_rows).column("proj")
    assert pa.types.is_fixed_size_list(read.type) and read.type.list_size == DIM
    assert np.array_equal(by_hand.reshape(-1, DIM),
                          np.stack(read.to_numpy(zero_copy_only=False)))

"""`raycache predict` / raycache.predict_file: a trained head over a file, in-process and with
Ray Data; outputs equal Head.predict and Head.embed; the GPU pipeline built on a CPU machine;
bad input refused before any work, and never a half-written output."""

import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import raycache
from raycache import ConfigError, EncoderError, RaycacheError
from raycache._cli import main
from raycache._compute.pool import Pool, size_pool
from raycache._compute.pool_config import PoolConfig
from raycache._encoders.batching import Batching
from raycache._predict.run import PredictConfig, build_pipeline, in_process, plan, rows_per_call
from raycache._source.files import plan_units
from tests.conftest import separable, toy_fill


def write_jsonl(path: Path, table: pa.Table) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in table.to_pylist()))
    return path


@pytest.fixture(scope="module")
def heads(tmp_path_factory) -> dict:
    """A toy cache (filled in-process), a classifier and a similarity head trained on it
    in-process, and new rows of the same classes as JSONL."""
    root = tmp_path_factory.mktemp("predict")
    (root / "source").mkdir()
    pq.write_table(separable(n=300, classes=3), root / "source" / "a.parquet")
    store = str(root / "store")
    raycache.fill(toy_fill(str(root / "source"), store, in_process=True))
    common = {"cache": "toy", "store": {"uri": store}, "num_workers": 0, "progress": False,
              "epochs": 1, "lr": 0.05}
    classifier = raycache.train(common).checkpoint
    similarity = raycache.train({**common, "objective": "groups", "embedding_dim": 4,
                                 "normalize": True, "groups": {"loss": "infonce"}}).checkpoint
    rows = separable(n=300, classes=3, seed=0).slice(200, 100)  # same classes, in order
    return {"classifier": classifier, "similarity": similarity, "rows": rows,
            "jsonl": write_jsonl(root / "new" / "rows.jsonl", rows), "root": root}


def vectors(column: pa.ChunkedArray) -> np.ndarray:
    return np.stack(column.to_numpy(zero_copy_only=False))


def test_cli_writes_head_predict_and_probabilities(heads, tmp_path, capsys):
    out = tmp_path / "pred.parquet"
    assert main(["predict", "--checkpoint", heads["classifier"], "--input",
                 str(heads["jsonl"]), "--output", str(out), "--in-process", "true",
                 "--no-progress"]) == 0
    assert "predict: 100 rows ->" in capsys.readouterr().out
    table = pq.read_table(out)
    assert table.column_names == ["id", "prediction", "probabilities"]  # the cache's key kept
    rows = heads["rows"]
    assert table.column("id").to_pylist() == rows.column("id").to_pylist()
    head = raycache.load_head(heads["classifier"])
    expected = head.predict(rows.column("features").to_pylist())
    assert table.column("prediction").to_pylist() == expected.tolist()
    probs = vectors(table.column("probabilities"))
    assert probs.shape == (100, 3) and np.allclose(probs.sum(1), 1, atol=1e-5)
    assert (probs.argmax(1) == expected).all()
    assert (expected == rows.column("label").to_numpy()).mean() > 0.9  # a head that learned


def test_similarity_head_writes_head_embed_and_passes_asked_columns_through(heads, tmp_path):
    out = tmp_path / "emb.parquet"
    result = raycache.predict_file({"checkpoint": heads["similarity"], "input":
                                    str(heads["jsonl"]), "output": str(out),
                                    "passthrough": ["features", "id"], "in_process": True,
                                    "progress": False})
    assert result.rows == 100 and result.where.startswith("in-process")
    table = pq.read_table(out)
    assert table.column_names == ["features", "id", "embedding"]  # an input column too
    assert table.column("features").to_pylist() == heads["rows"].column("features").to_pylist()
    assert table.schema.field("embedding").type == pa.list_(pa.float32(), 4)
    head = raycache.load_head(heads["similarity"])
    expected = head.embed(heads["rows"].column("features").to_pylist())
    assert np.allclose(vectors(table.column("embedding")), expected, atol=1e-6)


def test_without_a_recorded_key_every_non_input_column_passes_through(heads, tmp_path):
    old = tmp_path / "old"  # a checkpoint from before head.json recorded the key
    old.mkdir()
    saved = json.loads((Path(heads["classifier"]) / "head.json").read_text())
    del saved["key"]
    (old / "head.json").write_text(json.dumps(saved))
    weights = (Path(heads["classifier"]) / "head.safetensors").read_bytes()
    (old / "head.safetensors").write_bytes(weights)
    p = plan(PredictConfig(str(old), str(heads["jsonl"]), str(tmp_path / "o.parquet")))
    assert p.passthrough == ["id", "label", "name"]  # all but the encoder's input, "features"


def test_keep_the_old_name_of_passthrough_still_works_with_a_warning_naming_it(
        heads, tmp_path, capsys):
    base = {"checkpoint": heads["similarity"], "input": str(heads["jsonl"]),
            "in_process": True, "progress": False}
    with pytest.warns(DeprecationWarning, match=r"PredictConfig: keep is the old name of "
                                                r"passthrough \(renamed in raycache 0.2; the "
                                                r"old name goes in 0.3\): write passthrough"):
        raycache.predict_file({**base, "output": str(tmp_path / "a.parquet"),
                               "keep": ["features", "id"]})
    assert pq.read_schema(tmp_path / "a.parquet").names == ["features", "id", "embedding"]
    with pytest.raises(ConfigError, match="keep and passthrough are both given"):
        raycache.predict_file({**base, "output": str(tmp_path / "b.parquet"),
                               "keep": ["id"], "passthrough": ["id"]})
    assert main(["predict", "--checkpoint", heads["similarity"], "--input", str(heads["jsonl"]),
                 "--output", str(tmp_path / "c.parquet"), "--in-process", "true",
                 "--no-progress", "--keep", "label", "id"]) == 0
    err = capsys.readouterr().err
    assert "raycache predict: warning: --keep is the old name of --passthrough" in err, err
    assert pq.read_schema(tmp_path / "c.parquet").names == ["label", "id", "embedding"]
    assert main(["predict", "--checkpoint", heads["similarity"], "--input", str(heads["jsonl"]),
                 "--output", str(tmp_path / "d.parquet"), "--in-process", "true",
                 "--no-progress", "--passthrough", "label"]) == 0
    assert "warning" not in capsys.readouterr().err
    assert pq.read_schema(tmp_path / "d.parquet").names == ["label", "embedding"]


def test_predict_config_takes_keep_as_its_old_name_warning_at_the_callers_line():
    import dataclasses

    with pytest.warns(DeprecationWarning, match=r"PredictConfig\(\): keep= is the old name "
                                                r"of passthrough=") as caught:
        cfg = PredictConfig("ckpt", "in.jsonl", "out.parquet", keep=["id"])
    assert cfg.passthrough == ["id"] and caught[0].filename == __file__
    assert dataclasses.replace(cfg, overwrite=True).passthrough == ["id"]
    with pytest.raises(TypeError, match="got passthrough= and keep=, its old name"):
        PredictConfig("ckpt", "in.jsonl", "out.parquet", passthrough=["id"], keep=["id"])


def test_bad_input_is_refused_before_any_work_naming_the_fix(heads, tmp_path, capsys):
    out = tmp_path / "out.parquet"
    base = {"checkpoint": heads["classifier"], "input": str(heads["jsonl"]),
            "output": str(out), "in_process": True, "progress": False}
    no_features = write_jsonl(tmp_path / "x.jsonl", heads["rows"].drop_columns(["features"]))
    with pytest.raises(ConfigError, match=r"input column 'features' \(read by encoder 'proj'"
                                          r".*Rename the column"):
        raycache.predict_file({**base, "input": str(no_features)})
    with pytest.raises(ConfigError, match=r"passthrough: column 'nope' is not in"):
        raycache.predict_file({**base, "passthrough": ["nope"]})
    with pytest.raises(RaycacheError, match=r"is not a head checkpoint .*TrainResult.checkpoint"):
        raycache.predict_file({**base, "checkpoint": str(tmp_path / "missing")})
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "head.json").write_text("{not json")
    (broken / "head.safetensors").write_bytes(b"")
    with pytest.raises(RaycacheError, match=r"checkpoint .*broken' is unreadable"):
        raycache.predict_file({**base, "checkpoint": str(broken)})
    assert not out.exists()

    out.write_bytes(b"precious")
    assert main(["predict", "--checkpoint", heads["classifier"], "--input",
                 str(heads["jsonl"]), "--output", str(out), "--no-progress"]) == 3
    err = capsys.readouterr().err
    assert "raycache predict: error:" in err and "exists; pass --overwrite" in err
    assert out.read_bytes() == b"precious"
    assert raycache.predict_file({**base, "overwrite": True}).rows == 100
    assert pq.read_table(out).num_rows == 100
    with pytest.raises(ConfigError, match="is a folder; give the path of a Parquet file"):
        raycache.predict_file({**base, "output": str(tmp_path)})


def test_a_failure_part_way_leaves_no_output(heads, tmp_path):
    folder = tmp_path / "in"
    write_jsonl(folder / "a.jsonl", heads["rows"])
    bad = heads["rows"].set_column(1, "features", pa.array(["x"] * 100))
    write_jsonl(folder / "b.jsonl", bad)  # read after a.jsonl's rows were written
    out = tmp_path / "out" / "pred.parquet"
    with pytest.raises(EncoderError, match=r"column 'features' is string"):
        raycache.predict_file({"checkpoint": heads["classifier"], "input": str(folder),
                               "output": str(out), "rows_per_batch": 50, "in_process": True,
                               "progress": False})
    assert list((tmp_path / "out").iterdir()) == []  # no output, no temporary file
    scalars = tmp_path / "scalars.csv"  # one number where the encoder takes 8
    scalars.write_text("id,features\na,1.5\nb,2.5\n")
    with pytest.raises(EncoderError, match=r"failed on input columns \{'features': 'double'\}"):
        raycache.predict_file({"checkpoint": heads["classifier"], "input": str(scalars),
                               "output": str(out), "in_process": True, "progress": False})
    assert not out.exists()


def test_pool_and_in_process_are_decided_from_the_cluster_and_the_input(heads, monkeypatch):
    cfg = PredictConfig(heads["classifier"], str(heads["jsonl"]), "o.parquet")
    gpu = size_pool(cfg.pool, [{"CPU": 16.0, "GPU": 2.0}], None)
    assert (gpu.gpus, gpu.actors, gpu.batching.max_rows) == (1.0, 2, 16384)
    cpu = size_pool(cfg.pool, [{"CPU": 2.0}], None)
    assert cpu.gpus == 0 and cpu.batching.max_rows == 256
    with pytest.raises(ConfigError, match=r"pool.num_gpus=1: the cluster has 2 CPUs and 0 GPUs"):
        size_pool(PoolConfig(num_gpus=1.0), [{"CPU": 2.0}], None)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    if "ray" in sys.modules:  # the session's Ray, started by other tests
        monkeypatch.setattr(sys.modules["ray"], "is_initialized", lambda: False)
    # no cluster: here, whatever the size (unless this machine has a GPU for num_gpus: auto)
    assert in_process(cfg, None, 10_000)[0] and in_process(cfg, 10**6, 0)[0]
    assert in_process(cfg, None, 10**9)[0] is not torch.cuda.is_available()
    one_gpu = PredictConfig(cfg.checkpoint, cfg.input, cfg.output, pool=PoolConfig(num_gpus=1.0))
    assert not in_process(one_gpu, 10, 10)[0]
    monkeypatch.setenv("RAY_ADDRESS", "auto")  # a cluster to join, of unknown GPUs: Ray Data
    assert in_process(cfg, 10, 10) == (False, "a Ray cluster")


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_ray_data_path_equals_in_process(ray_session, heads, tmp_path):
    folder = tmp_path / "in"  # two files, several batches each: order across blocks
    write_jsonl(folder / "a.jsonl", heads["rows"].slice(0, 60))
    write_jsonl(folder / "b.jsonl", heads["rows"].slice(60))
    base = {"checkpoint": heads["classifier"], "input": str(folder), "rows_per_batch": 25,
            "progress": False}
    on_ray = raycache.predict_file({**base, "output": str(tmp_path / "r.parquet"),
                                    "in_process": False})
    local = raycache.predict_file({**base, "output": str(tmp_path / "l.parquet"),
                                   "in_process": True})
    assert "task(s)" in on_ray.where and local.where.startswith("in-process")  # CPU: tasks
    r, loc = pq.read_table(tmp_path / "r.parquet"), pq.read_table(tmp_path / "l.parquet")
    assert r.num_rows == loc.num_rows == 100
    assert r.column("id").to_pylist() == heads["rows"].column("id").to_pylist()
    assert r.column("prediction").equals(loc.column("prediction"))
    assert np.allclose(vectors(r.column("probabilities")), vectors(loc.column("probabilities")),
                       atol=1e-6)


@pytest.mark.ray
@pytest.mark.timeout(300)
@pytest.mark.parametrize("gpus", [1.0, 0.25])
def test_the_gpu_pipeline_builds_on_a_cpu_machine(ray_session, heads, tmp_path, gpus):
    cfg = PredictConfig(heads["classifier"], str(heads["jsonl"]), str(tmp_path / "o.parquet"),
                        pool=PoolConfig(num_gpus=gpus, block_rows=4096))
    p = plan(cfg)
    units, _ = plan_units(p.files, p.format, {}, rows_per_call(cfg))
    pool = Pool(actors=2, cpus=1.0, gpus=gpus, threads=1, batching=Batching(4096, 65536),
                prepare_cpus=1.0, prepare_actors=4)
    ds = build_pipeline(p, units, pool)  # Ray Data checks each stage's arguments here
    ops, op = {}, ds._logical_plan.dag
    while op is not None:
        ops[op.name] = op
        op = op.input_dependencies[0] if op.input_dependencies else None
    predict = ops["MapBatches(PredictActor)"]
    assert predict.ray_remote_args["num_gpus"] == gpus and predict.batch_size == 4096
    assert "num_gpus" not in ops["MapBatches(PrepareActor)"].ray_remote_args
    assert ds.context.execution_options.preserve_order
    assert not (tmp_path / "o.parquet").exists()  # built, not run


@pytest.mark.s3
def test_input_and_output_on_s3_and_no_temporary_object_left(heads, bucket, tmp_path):
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    fs.put(str(heads["jsonl"]), f"{bucket}/new/rows.jsonl")
    out = f"{bucket}/out/pred.parquet"
    base = {"checkpoint": heads["classifier"], "in_process": True, "progress": False}
    raycache.predict_file({**base, "input": f"{bucket}/new/rows.jsonl", "output": out})
    raycache.predict_file({**base, "input": str(heads["jsonl"]),
                           "output": str(tmp_path / "local.parquet")})
    with fs.open(out, "rb") as f:
        assert pq.read_table(f).equals(pq.read_table(tmp_path / "local.parquet"))
    fs.invalidate_cache()
    assert fs.ls(f"{bucket}/out", detail=False) == [out.removeprefix("s3://")]
    with pytest.raises(ConfigError, match="exists; pass --overwrite"):
        raycache.predict_file({**base, "input": str(heads["jsonl"]), "output": out})

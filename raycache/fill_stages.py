"""The fill's two model stages, each a Ray Data actor pool: prepare (tokenise) on CPUs, and
encode (on GPUs where asked), so the encoders receive ready inputs."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from raycache.config import EncoderConfig, FillConfig
from raycache.errors import EncoderError
from raycache.shards import STARTED
from raycache.sources import META

if TYPE_CHECKING:
    from raycache.resources import Pool

__all__ = ["EncodeActor", "PrepareActor", "prepared"]


def prepared(e: EncoderConfig) -> str:
    """The column that carries an encoder's model-ready inputs between stages."""
    return f"__in_{e.name}"


class PrepareActor:
    """Ray Data actor: each encoder's CPU preprocessing (tokenising, for text) as its own
    column; raw inputs are dropped unless they are also key or label columns."""

    def __init__(self, encoders: list[EncoderConfig], keep: list[str]):
        from raycache.encoders import REGISTRY

        self.encoders, self.keep = encoders, [*dict.fromkeys([*keep, *META])]
        self.prepare = {e.name: REGISTRY[e.kind].prepare(e) for e in encoders}

    def __call__(self, table: pa.Table) -> pa.Table:
        out = table.select(self.keep)
        for e in self.encoders:
            values = table.column(e.input).combine_chunks()
            out = out.append_column(prepared(e), self.prepare[e.name](values))
        return out


class EncodeActor:
    """Ray Data actor: loads each frozen encoder once (checking its weights), then turns each
    batch of prepared inputs into one embedding column per encoder."""

    def __init__(self, cfg: FillConfig, pool: Pool, digests: dict[str, str]):
        import torch

        from raycache.encoders import REGISTRY

        torch.set_num_threads(max(1, min(pool.threads, os.cpu_count() or 1)))
        if pool.device == "cuda" and not torch.cuda.is_available():
            raise EncoderError(
                f"encoder actor was given {pool.gpus:g} GPU by Ray, but torch "
                f"{torch.__version__} sees no CUDA device; install a CUDA build of torch on the "
                "GPU nodes, or set num_gpus: 0"
            )
        self.cfg = cfg
        self.encoders = {
            e.name: REGISTRY[e.kind].load(e, pool.device, pool.batching) for e in cfg.encoders
        }
        for e in cfg.encoders:
            loaded = self.encoders[e.name].weights_digest()
            if loaded != digests[e.name]:
                raise EncoderError(
                    f"encoder {e.name!r} loaded weights {loaded[:12]} in a fill actor, but the "
                    f"fingerprint was computed from {digests[e.name][:12]}: its weights differ "
                    "between loads (random initialisation?). Load fixed weights, or seed the "
                    "factory, so every actor encodes with the same model"
                )

    def __call__(self, table: pa.Table) -> pa.Table:
        started = time.time()
        inputs = {prepared(e) for e in self.cfg.encoders}
        out = table.drop_columns([c for c in table.column_names if c in inputs])
        for e in self.cfg.encoders:
            emb = self.encoders[e.name].forward(table.column(prepared(e))).astype(e.dtype)
            flat = pa.array(emb.reshape(-1), type=pa.from_numpy_dtype(emb.dtype))
            # non-null elements: no definition levels to decode when training reads the shard
            kind = pa.list_(pa.field("element", flat.type, nullable=False), emb.shape[1])
            out = out.append_column(e.name, pa.FixedSizeListArray.from_arrays(flat, type=kind))
        return out.append_column(STARTED, pa.array(np.full(table.num_rows, started)))

"""The pairs table of objective: pairs: read it, check its keys against the cache, split it by a
hash of each pair's keys, and hold a worker's pairs with the embeddings of their keys (joined
once at the start of a run, kept in memory, reshuffled every epoch)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch

from raycache._cache.vectors import unpack
from raycache._errors import ConfigError, SourceError
from raycache._fit.part import features, selected
from raycache._fit.split import validation_mask
from raycache._source.config import SourceConfig
from raycache._train.config import PairsConfig

if TYPE_CHECKING:
    from raycache._cache.committed import Cache
    from raycache._train.config import TrainConfig
    from raycache._train.runspec import WorkerSpec

__all__ = ["PairPart", "data_problems", "data_sources", "pair_ids", "pair_parts", "read_pairs"]

SHOWN = 5
"""Missing keys named in the error (the rest counted)."""


def read_pairs(p: PairsConfig) -> pa.Table:
    """The pairs table as columns left, right (keys as strings) and score (float64; 1.0 for
    every pair when `score` is none), in file order."""
    from raycache._source.files import list_files, parse_text

    try:
        fmt, files = list_files(SourceConfig(path=p.path or "", format=p.format))
    except SourceError as exc:
        raise ConfigError([f"pairs.path={p.path!r}: "
                           + str(exc).replace("source.format", "pairs.format")]) from exc
    wanted = [p.left, p.right] + ([p.score] if p.score else [])
    tables = []
    for f in files:
        with fsspec.open(f.uri, "rb") as fh:
            if fmt == "parquet":
                table = pq.read_table(fh, columns=[c for c in wanted
                                                   if c in pq.read_schema(fh).names])
            else:
                table = parse_text(fh, fmt)
        missing = [c for c in wanted if c not in table.column_names]
        if missing:
            raise ConfigError([f"pairs table {f.uri!r} has no column {missing[0]!r}; it holds "
                               f"{table.column_names}: name its columns with pairs.left, "
                               "pairs.right and pairs.score"])
        tables.append(table.select(wanted))
    table = pa.concat_tables(tables, promote_options="permissive")
    out = {"left": pc.cast(table.column(p.left), pa.string()),
           "right": pc.cast(table.column(p.right), pa.string())}
    if p.score:
        score = table.column(p.score)
        if not (pa.types.is_integer(score.type) or pa.types.is_floating(score.type)
                or pa.types.is_boolean(score.type)):
            raise ConfigError([f"pairs.score={p.score!r} holds {score.type} values; expected "
                               "numbers: a similarity score or a 0/1 label"])
        out["score"] = pc.cast(score, pa.float64())
    else:
        out["score"] = pa.array(np.ones(table.num_rows))
    return pa.table(out)


def pair_ids(table: pa.Table) -> pa.Array:
    """A pair's identity for the split: its two keys, in sorted order (so (a, b) and (b, a)
    fall on the same side)."""
    return pa.array([f"{a}\x1f{b}" if a <= b else f"{b}\x1f{a}"
                     for a, b in zip(table.column("left").to_pylist(),
                                     table.column("right").to_pylist(), strict=True)])


def data_problems(cfg: TrainConfig, cache: Cache) -> list[str]:
    """The pairs table read on the driver, before any work: its columns and values, and every
    key it names present in the cache."""
    p = cfg.pairs
    try:
        table = read_pairs(p)
    except ConfigError as exc:
        return exc.problems
    out = []
    if table.num_rows == 0:
        return [f"pairs table {p.path!r} holds no pairs"]
    for side in ("left", "right", "score"):
        nulls = table.column(side).null_count
        if nulls:
            name = getattr(p, side)
            out.append(f"pairs table {p.path!r}: column {name!r} has {nulls} empty values; "
                       "drop those pairs")
    if out:
        return out
    score = table.column("score").to_numpy()
    if not np.isfinite(score).all():
        bad = score[~np.isfinite(score)]
        return [f"pairs table {p.path!r}: column {p.score!r} has {len(bad)} NaN or infinite "
                f"values (e.g. {bad[:SHOWN].tolist()}); drop or fix those pairs"]
    out += split_problems(table, p, cfg.evaluation.val_fraction)
    if p.loss == "contrastive" and not np.isin(score, (0.0, 1.0)).all():
        bad = score[~np.isin(score, (0.0, 1.0))][:SHOWN].tolist()
        out.append(f"pairs.loss=contrastive needs 0/1 labels in {p.score!r}, but it holds "
                   f"e.g. {bad}; use pairs.loss: cosine for graded scores")
    if p.loss == "cosine" and (score.min() < -1 or score.max() > 1):
        out.append(f"pairs.loss=cosine regresses the cosine similarity onto {p.score!r}, "
                   f"whose values run {score.min():g}..{score.max():g}; scale them into "
                   "[-1, 1] (e.g. divide STS scores 0..5 by 5)")
    if p.positives is not None and not (score >= p.positives).any():
        out.append(f"pairs.positives={p.positives}: no pair scores that high (the highest is "
                   f"{score.max():g}); lower it, or leave it out to train on every pair")
    key = cache.manifest.key_column
    have = pc.cast(cache.read_table(columns=[key]).column(key), pa.string())
    named = pc.unique(pa.chunked_array([*table.column("left").chunks,
                                        *table.column("right").chunks]))
    missing = named.filter(pc.invert(pc.is_in(named, value_set=have.combine_chunks())))
    if len(missing):
        shown = ", ".join(repr(k) for k in missing.to_pylist()[:SHOWN])
        out.append(f"pairs table {p.path!r}: {len(missing)} of its {len(named)} keys are not "
                   f"in cache {cache.name}/{cache.fingerprint[:12]} (key column {key!r}), "
                   f"e.g. {shown}; every {p.left!r} and {p.right!r} value must be a key of "
                   "the cache: fill the cache with those rows, or drop the pairs that name them")
    return out


def split_problems(table: pa.Table, p: PairsConfig, fraction: float) -> list[str]:
    """Where evaluation.val_fraction leaves no pairs to train on or none to validate on."""
    train, held = pair_parts(table, p, fraction, 0, 1)
    if train.num_rows and held.num_rows:
        return []
    side, fix = (("validation", "raise") if train.num_rows else ("training", "lower"))
    kept = " (pairs.positives keeps only the pairs that score that high)" \
        if p.positives is not None and not train.num_rows else ""
    return [f"evaluation.val_fraction={fraction}: of the {table.num_rows} pairs of {p.path!r}, "
            f"{train.num_rows} train and {held.num_rows} validate{kept}; with no {side} pairs "
            f"a run reports {side} metrics of 0 and picks them as best. {fix.capitalize()} "
            "it, or add pairs"]


class PairPart:
    """A worker's pairs: each key's embedding once, and per pair its two embedding rows and its
    targets. A batch is (pairs, 2, dim) features and (pairs, 3) float64 targets: the score, and
    the two keys' ids (their row in the cache), so that a loss can tell copies of a key apart
    from other keys."""

    overlap = ""
    """Its rows are all there (rows.Rows)."""

    def __init__(self, emb: torch.Tensor, rows: torch.Tensor, y: torch.Tensor):
        self.emb, self.rows, self.y = emb, rows, y

    def __len__(self) -> int:
        return len(self.y)

    def batches(self, batch_size: int, seed: int | None,
                then: int | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """One pass in an order drawn from `seed` (None: as stored); `then` is unused here."""
        n = len(self.y)
        order = (torch.arange(n) if seed is None else
                 torch.randperm(n, generator=torch.Generator().manual_seed(seed)))
        order = order.to(self.rows.device)
        for i in range(0, n, batch_size):
            idx = order[i : i + batch_size]
            yield self.emb[self.rows[idx]], self.y[idx]


def pair_parts(table: pa.Table, p: PairsConfig, fraction: float, rank: int,
           world: int) -> tuple[pa.Table, pa.Table]:
    """This worker's (train, validation) pairs: the split by pair_ids, each side dealt out
    to the workers in turn (mnr with `positives`: training keeps the positive pairs only)."""
    mask = np.asarray(validation_mask(pair_ids(table), fraction), dtype=bool)
    train = ~mask
    if p.loss == "mnr" and p.positives is not None:
        train &= table.column("score").to_numpy() >= p.positives
    return (table.take(np.flatnonzero(train)[rank::world]),
            table.take(np.flatnonzero(mask)[rank::world]))


def join(spec: WorkerSpec, keys: pa.Array) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """(keys found, their embeddings, their row numbers in the cache), read shard by shard:
    the key column first, the encoder columns only of shards that hold a wanted key."""
    found, feats, ids, start = [], [], [], 0
    for path, rows in spec.shards:
        with spec.store.fs.open(path, "rb") as f:
            shard = pq.ParquetFile(f)
            have = selected(spec.reading, path, shard.read(columns=[spec.key])).column(spec.key)
            have = pc.cast(have, pa.string())
            hit = np.asarray(pc.is_in(have, value_set=keys), dtype=bool)
            if hit.any():
                where = np.flatnonzero(hit)
                read = unpack(shard.read(columns=list(spec.head.encoders)))
                table = selected(spec.reading, path, read)
                table = table.take(where)
                feats.append(np.array(features(table, spec.head.encoders)))
                found.append(have.take(where))
                ids.append(start + where)
        start += rows
    if not feats:
        return pa.array([], pa.string()), np.empty((0, spec.head.in_dim), np.float32), \
            np.empty(0, np.int64)
    return (pa.concat_arrays([c.combine_chunks() for c in found]), np.concatenate(feats),
            np.concatenate(ids))


def data_sources(spec: WorkerSpec, rank: int, device: torch.device) -> tuple[PairPart, PairPart]:
    """This worker's (train, validation) pairs with their keys' embeddings, in host memory
    (device memory with placement: gpu)."""
    p = spec.recipe.pairs
    parts = pair_parts(read_pairs(p), p, spec.recipe.evaluation.val_fraction, rank, spec.world)
    wanted = pc.unique(pa.chunked_array([chunk for t in parts for c in ("left", "right")
                                         for chunk in t.column(c).chunks], pa.string()))
    keys, emb, ids = join(spec, wanted)
    where = device if spec.placement == "gpu" else torch.device("cpu")
    table = torch.from_numpy(emb).to(where)  # one copy, shared by both splits
    out = []
    for part in parts:
        sides = [pc.index_in(part.column(c), value_set=keys) for c in ("left", "right")]
        lost = sum(s.null_count for s in sides)
        if lost:
            raise ConfigError([f"pairs table {p.path!r}: {lost} keys were not found in the "
                               "cache's shards on this worker; train again (the driver checks "
                               "the keys before training)"])
        rows = np.stack([s.to_numpy(zero_copy_only=False) for s in sides], axis=1)
        y = np.stack([part.column("score").to_numpy(), ids[rows[:, 0]], ids[rows[:, 1]]],
                     axis=1).astype(np.float64)
        out.append(PairPart(table,
                             torch.from_numpy(rows.astype(np.int64)).to(where),
                             torch.from_numpy(y).to(where)))
    return out[0], out[1]

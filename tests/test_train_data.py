"""A worker's rows without a cluster (raycache._train.data): in memory and streamed, each
side's rows in order, read ahead, their cores given back."""

import dataclasses
import os

import numpy as np
import torch

from tests.train_specs import spec


def write_shards(folder, sizes, seed) -> tuple[tuple[str, int], ...]:
    """Shards of (id, label, a 4-float embedding "e") with these row counts: (path, rows)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    shards = []
    for i, n in enumerate(sizes):
        emb = rng.normal(size=(n, 4)).astype(np.float32)
        table = pa.table({"id": [f"r{i}-{j}" for j in range(n)],
                          "label": pa.array(rng.integers(0, 3, n)),
                          "e": pa.FixedSizeListArray.from_arrays(pa.array(emb.ravel()), 4)})
        pq.write_table(table, folder / f"s{i}.parquet")
        shards.append((str(folder / f"s{i}.parquet"), n))
    return tuple(shards)


def test_streamed_share_sees_each_row_once_and_matches_the_in_memory_split(tmp_path):
    from raycache._train.data.in_memory import InMemory
    from raycache._train.data.streamed import Streamed

    shards = write_shards(tmp_path, (50, 70, 30), seed=0)
    base = spec(tmp_path).replace(rows=150, shards=shards, num_workers=2,
                               prefetch_batches=2)
    for rank in (0, 1):
        mem_train, mem_val = InMemory.for_worker(base, rank, torch.device("cpu"))
        for validation, mem in ((False, mem_train), (True, mem_val)):
            stream = Streamed(base, rank, validation, torch.device("cpu"))
            epoch = [torch.cat(t) for t in zip(*stream.batches(16, seed=3), strict=True)]
            again = [torch.cat(t) for t in zip(*stream.batches(16, seed=4), strict=True)]
            assert len(stream) == len(mem) > 0
            key = lambda x: sorted(map(tuple, x.tolist()))  # noqa: E731
            assert key(epoch[0]) == key(mem.x) == key(again[0])  # the same rows, each once
            assert not torch.equal(epoch[0], again[0])  # in another order each epoch


def test_streamed_share_reads_the_next_pass_ahead_with_the_same_rows_in_the_same_order(
        tmp_path):
    from raycache._train.data.streamed import Streamed

    shards = write_shards(tmp_path, (40, 40, 40), seed=1)
    base = spec(tmp_path).replace(rows=120, shards=shards, prefetch_batches=2)
    ahead = Streamed(base, 0, False, torch.device("cpu"))
    fresh = Streamed(base, 0, False, torch.device("cpu"))
    for epoch in range(3):
        got = list(ahead.batches(16, seed=epoch, then=epoch + 1))
        assert ahead.ahead is not None and ahead.ahead[0] == epoch + 1  # next pass under way
        assert len(ahead.ahead[1]) == 2
        want = list(fresh.batches(16, seed=epoch))  # no read-ahead: the reference
        assert len(got) == len(want)
        for (x, y), (wx, wy) in zip(got, want, strict=True):
            assert torch.equal(x, wx) and torch.equal(y, wy)
    # a pass with another seed than the one read ahead for discards the read-ahead
    other = [torch.cat(t) for t in zip(*ahead.batches(16, seed=99), strict=True)]
    ref = [torch.cat(t) for t in zip(*fresh.batches(16, seed=99), strict=True)]
    assert torch.equal(other[0], ref[0])
    # validation passes (seed None) always read the next pass ahead
    val = Streamed(base, 0, True, torch.device("cpu"))
    first = [torch.cat(t) for t in zip(*val.batches(64, seed=None), strict=True)]
    assert val.ahead is not None and val.ahead[0] is None
    second = [torch.cat(t) for t in zip(*val.batches(64, seed=None), strict=True)]
    assert torch.equal(first[0], second[0])


def test_a_streamed_share_leaves_its_readers_cores_and_a_run_gives_them_back(tmp_path):
    import pyarrow.parquet as pq

    import raycache
    from raycache._train.data.streamed import READERS
    from raycache._train.worker.assemble import data_sources
    from tests.conftest import separable, toy_fill

    before = torch.get_num_threads()
    torch.set_num_threads(READERS + 1)
    try:
        s = spec(tmp_path).replace(placement="stream", shards=(), rows=0)
        data_sources(s, 0, torch.device("cpu"))
        cores = min(READERS + 1, os.cpu_count() or 1)
        assert torch.get_num_threads() == max(1, cores - READERS)

        torch.set_num_threads(READERS + 1)  # an in-process run restores the caller's threads
        (tmp_path / "src").mkdir()
        pq.write_table(separable(n=200), tmp_path / "src" / "a.parquet")
        raycache.fill(toy_fill(str(tmp_path / "src"), str(tmp_path / "store"), in_process=True))
        run = raycache.train({"cache": "toy", "store": {"uri": str(tmp_path / "store")},
                              "epochs": 1, "num_workers": 0, "placement": "stream",
                              "progress": False})
        assert run.spec.placement == "stream" and len(run.history) == 1
        assert torch.get_num_threads() == READERS + 1
    finally:
        torch.set_num_threads(before)


def test_an_in_memory_share_gathers_each_sides_rows_in_order_from_every_shard(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from raycache._fit.split import validation_mask
    from raycache._train.data.in_memory import InMemory

    rng = np.random.default_rng(1)
    shards, tables = [], []
    for i, n in enumerate((40, 25)):
        a = rng.normal(size=(n, 3)).astype(np.float32)
        b = rng.normal(size=(n, 2)).astype(np.float16)
        table = pa.table({"id": [f"r{i}-{j}" for j in range(n)],
                          "label": pa.array(rng.integers(0, 3, n)),
                          "e": pa.FixedSizeListArray.from_arrays(pa.array(a.ravel()), 3),
                          "f": pa.FixedSizeListArray.from_arrays(pa.array(b.ravel()), 2)})
        pq.write_table(table, tmp_path / f"s{i}.parquet")
        shards.append((str(tmp_path / f"s{i}.parquet"), n))
        tables.append(table)
    whole = pa.concat_tables(tables)
    held = validation_mask(whole.column("id"), 0.3).to_numpy(zero_copy_only=False)
    assert 0 < held.sum() < len(held)
    for encoders, dims in ((("e",), [3]), (("e", "f"), [3, 2])):
        base = spec(tmp_path, val_fraction=0.3)
        base = base.replace(rows=65, shards=tuple(shards), checks=(),
                                   head=dataclasses.replace(base.head, encoders=encoders,
                                                            in_dim=sum(dims)))
        train, val = InMemory.for_worker(base, 0, torch.device("cpu"))
        x = np.concatenate([np.stack(whole.column(e).to_numpy(zero_copy_only=False))
                            .astype(np.float32) for e in encoders], axis=1)
        y = whole.column("label").to_numpy()
        assert torch.equal(train.x, torch.from_numpy(x[~held]))
        assert torch.equal(val.x, torch.from_numpy(x[held]))
        assert torch.equal(train.y, torch.from_numpy(y[~held]))
        assert torch.equal(val.y, torch.from_numpy(y[held]))


def test_a_streamed_validation_side_keeps_its_rows_from_the_first_training_pass(
        tmp_path, monkeypatch):
    from raycache._train.data import streamed
    from raycache._train.data.in_memory import InMemory

    shards = write_shards(tmp_path, (50, 70, 30), seed=2)
    base = spec(tmp_path).replace(rows=150, shards=shards, checks=())
    cpu = torch.device("cpu")
    _, want = InMemory.for_worker(base, 0, cpu)

    monkeypatch.setattr(streamed, "KEPT_VALIDATION_BYTES", 0)  # too large to keep: read again
    train, val = streamed.Streamed.for_worker(base, 0, cpu)
    assert train.hands_to is None
    list(train.batches(16, seed=1))
    assert torch.equal(torch.cat([x for x, _ in val.batches(16, seed=None)]), want.x)

    monkeypatch.undo()
    train, val = streamed.Streamed.for_worker(base, 0, cpu)
    assert train.hands_to is val
    list(train.batches(16, seed=1))  # the first pass hands each piece's validation rows over
    for path, _ in shards:
        os.remove(path)  # so a validation read of any shard would fail
    for _ in range(2):
        x, y = (torch.cat(t) for t in zip(*val.batches(16, seed=None), strict=True))
        assert torch.equal(x, want.x) and torch.equal(y, want.y)

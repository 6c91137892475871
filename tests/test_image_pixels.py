"""Images cross the hop as uint8: the prepare stage resizes and crops (the processor's own PIL
steps), the model's device rescales and normalises, equal bit for bit to the processor's float32
pixels; image blocks are sized by their bytes, not by a shard."""

import io
import json
import shutil

import numpy as np
import pyarrow as pa
import pytest

from raycache._compute.prepare import PrepareActor, prepared
from raycache._encoders import ENCODERS
from raycache._encoders.config import EncoderConfig
from raycache._encoders.hf_image import pixels
from raycache._encoders.pixels import host_block, nested
from tests import test_images
from tests.test_images import SIZE, image_encoder, reference, tower

vit, digits, digit_folder = test_images.vit, test_images.digits, test_images.digit_folder
"""test_images' module fixtures, made again for this module."""

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def images(digits) -> pa.Array:
    """Digits (grey PNGs, upscaled) and two photographs (427x640 JPEGs), each one resized."""
    from PIL import Image
    from sklearn.datasets import load_sample_images

    photos = []
    for photo in load_sample_images().images:
        out = io.BytesIO()
        Image.fromarray(photo).save(out, format="JPEG", quality=95)
        photos.append(out.getvalue())
    return pa.array([*digits[0][:10], *photos], pa.binary())


def processor_pixels(folder, values: pa.Array, **kwargs) -> np.ndarray:
    """The folder's image processor (PIL backend) on `values`, as the old prepare stage ran it."""
    from PIL import Image
    from transformers import AutoImageProcessor

    pil = [Image.open(io.BytesIO(b)).convert("RGB") for b in values.to_pylist()]
    return AutoImageProcessor.from_pretrained(folder, backend="pil")(
        images=pil, return_tensors="np", **kwargs)["pixel_values"]


def test_the_prepare_stage_sends_uint8_pixels_one_byte_a_channel_of_a_pixel(vit, images):
    cfg = EncoderConfig(**image_encoder(vit))
    n = len(images)
    table = pa.table({"id": [f"i{i}" for i in range(n)], "image": images, "__block": [0] * n,
                      "__row": list(range(n)), "__source": ["a"] * n, "__source_rows": [n] * n})
    out = PrepareActor([cfg], ["id"])(table)
    column = out.column(prepared(cfg)).combine_chunks()
    kind = column.type
    for size in (3, SIZE, SIZE):  # (channels, height, width), in the type
        assert pa.types.is_fixed_size_list(kind) and kind.list_size == size
        kind = kind.value_type
    assert kind == pa.uint8()
    assert column.nbytes == len(images) * 3 * SIZE * SIZE  # no float32 (4x) across the hop
    crossed = pixels(column)
    assert crossed.dtype == np.uint8 and crossed.shape == (len(images), 3, SIZE, SIZE)
    np.testing.assert_array_equal(crossed, processor_pixels(vit, images, do_rescale=False,
                                                            do_normalize=False))
    assert ENCODERS["hf-image"].input_bytes(cfg) == 3 * SIZE * SIZE


def test_the_device_rescales_and_normalises_as_the_processor_did_bit_for_bit(
        vit, images, tmp_path):
    """For ViT and the processors of CLIP, SigLIP, DINOv2 (resize, then crop) and ConvNeXt
    (crop_pct): the uint8 pixels through Scaling equal the processor's float32 pixels, so the
    embeddings equal those of the old float32 path exactly (and the fingerprint need not move
    for the pixels; it names the fixed backend)."""
    import torch

    family = ENCODERS["hf-image"]
    folders = {"vit": vit, **{k: tower(k, tmp_path / k)
                              for k in ("clip", "siglip", "dinov2", "convnext")}}
    for kind, folder in folders.items():
        cfg = EncoderConfig(**image_encoder(folder))
        prepare = family.prepare(cfg)
        assert prepare.scaling is not None, kind
        assert prepare.processor.backend == "pil" and family.describe(cfg)["image_backend"] == "pil"
        column = prepare(images)
        old = processor_pixels(folder, images)
        assert old.dtype == np.float32 and pixels(column).dtype == np.uint8, kind
        got = prepare.scaling.apply(torch.from_numpy(np.array(pixels(column))),
                                    torch.float32).numpy()
        np.testing.assert_array_equal(got, old, err_msg=kind)
        encoder = family.load(cfg, "cpu")
        np.testing.assert_array_equal(encoder.forward(column), encoder.forward(nested(old)),
                                      err_msg=kind)
    chunked = pa.chunked_array([column.slice(0, 5), column.slice(5, 0), column.slice(5)])
    np.testing.assert_array_equal(encoder.forward(chunked), encoder.forward(column))  # a batch
    #   of several blocks, as Ray Data joins them: each chunk copied once, in order, also into
    #   the host tensor for a GPU (plain memory here, where torch has no pinned allocator)
    for device in ("cpu", "cuda"):
        host = host_block(chunked, device)
        assert host.dtype == torch.uint8
        np.testing.assert_array_equal(host.numpy(), pixels(column))


def test_a_rescale_no_float32_step_replays_keeps_the_processors_float32_pixels(
        vit, images, tmp_path):
    """rescale_factor 0.0037: neither x * f32(0.0037) nor x / f32(1 / 0.0037) equals the
    processor's float64 product on every level, so its own pixels cross, as before."""
    folder = tmp_path / "odd"
    shutil.copytree(vit, folder)
    config = json.loads((folder / "preprocessor_config.json").read_text())
    (folder / "preprocessor_config.json").write_text(json.dumps({**config,
                                                                 "rescale_factor": 0.0037}))
    family = ENCODERS["hf-image"]
    cfg = EncoderConfig(**image_encoder(folder))
    prepare = family.prepare(cfg)
    assert prepare.scaling is None
    column = prepare(images)
    np.testing.assert_array_equal(pixels(column), processor_pixels(folder, images))
    from PIL import Image

    pil = [Image.open(io.BytesIO(b)).convert("RGB") for b in images.to_pylist()]
    np.testing.assert_allclose(family.load(cfg, "cpu").forward(column),
                               reference(folder, pil, "pooler"), atol=1e-5)


def test_an_image_fill_in_blocks_under_a_shard_writes_each_block_as_a_shard(
        vit, digit_folder, tmp_path, monkeypatch):
    """Where a shard's pixels exceed BLOCK_BYTES, blocks are cut by bytes (no floor at a
    shard): here 100 rows of 32x32 pixels a block at most; the rows are those of the model."""
    import raycache
    from raycache._fill import encode

    monkeypatch.setattr(encode, "BLOCK_BYTES", 100 * 3 * SIZE * SIZE)
    cfg = {"name": "small-blocks", "store": {"uri": str(tmp_path / "store")},
           "source": {"path": str(digit_folder), "format": "imagefolder"},
           "encoders": [image_encoder(vit, pooling="mean")], "rows_per_shard": 256,
           "in_process": True, "progress": False}
    filled = raycache.fill(cfg)
    shards = filled.cache.manifest.shards
    assert filled.cache.manifest.rows == 600 and len(shards) == 8  # 75 rows each (600 / 8)
    assert {s.rows for s in shards} == {75}
    table = filled.cache.read_table(columns=["id", "vit"])
    from PIL import Image

    ids = sorted(table.column("id").to_pylist())[::97]
    want = reference(vit, [Image.open(digit_folder / k).convert("RGB") for k in ids], "mean")
    got = dict(zip(table.column("id").to_pylist(), table.column("vit").to_pylist(), strict=True))
    np.testing.assert_allclose(np.array([got[k] for k in ids]), want, atol=1e-5)

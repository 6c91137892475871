"""Image encoders (hf-image) and image-folder sources, on images no one here wrote: scikit-learn's
handwritten digits (rendered to PNG) and its sample photographs, through a small ViT with seeded
weights saved by the test."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import raycache
from raycache import BadInput, ConfigError, EncoderError, SourceError
from raycache._compute.pool import GPU_ON_CPU
from raycache._encoders import ENCODERS
from raycache._encoders.config import EncoderConfig

pytestmark = pytest.mark.timeout(240)

SIZE = 32
"""Pixels per side the test's ViT takes (its processor resizes every image to this)."""


@pytest.fixture(scope="module")
def vit(tmp_path_factory) -> Path:
    """A small ViT (seeded random weights, with its pooler) and its image processor, saved as a
    transformers model folder."""
    import torch
    from transformers import ViTConfig, ViTImageProcessor, ViTModel

    folder = tmp_path_factory.mktemp("vit")
    torch.manual_seed(0)
    config = ViTConfig(image_size=SIZE, patch_size=16, hidden_size=384, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=768)
    ViTModel(config).save_pretrained(folder)
    ViTImageProcessor(size={"height": SIZE, "width": SIZE}).save_pretrained(folder)
    return folder


def png(image: np.ndarray, side: int = 24) -> bytes:
    """An 8x8 digit (values 0..16) as PNG bytes, upscaled to `side` pixels, grey."""
    from PIL import Image

    grey = Image.fromarray((image * (255 / 16)).astype(np.uint8), mode="L")
    out = io.BytesIO()
    grey.resize((side, side), Image.Resampling.BICUBIC).save(out, format="PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def digits() -> tuple[list[bytes], np.ndarray]:
    """The first 600 of scikit-learn's 1,797 handwritten digits, as PNG bytes, and their
    labels."""
    from sklearn.datasets import load_digits

    d = load_digits()
    return [png(im) for im in d.images[:600]], d.target[:600]


def image_encoder(path: Path, **over) -> dict:
    return {"name": "vit", "kind": "hf-image", "input": "image", "path": str(path), **over}


def reference(folder: Path, images: list, pooling: str) -> np.ndarray:
    """transformers' own forward on the processor's pixels of `images` (PIL images)."""
    import torch
    from transformers import AutoImageProcessor, AutoModel

    pixels = AutoImageProcessor.from_pretrained(folder)(images=images, return_tensors="np")
    model = AutoModel.from_pretrained(folder).eval()
    with torch.no_grad():
        out = model(pixel_values=torch.from_numpy(pixels["pixel_values"]))
    return {"pooler": out.pooler_output, "cls": out.last_hidden_state[:, 0],
            "mean": out.last_hidden_state[:, 1:].mean(1)}[pooling].numpy()


def test_embeddings_equal_transformers_own_forward_on_digits_and_photographs(vit, digits):
    from PIL import Image
    from sklearn.datasets import load_sample_images

    photos = load_sample_images().images  # two 427x640 RGB photographs
    encoded = []
    for photo in photos:
        out = io.BytesIO()
        Image.fromarray(photo).save(out, format="JPEG", quality=95)
        encoded.append(out.getvalue())
    values = pa.array([*digits[0][:30], *encoded], pa.binary())
    pil = [Image.open(io.BytesIO(b)).convert("RGB") for b in values.to_pylist()]
    for pooling in ("auto", "cls", "mean"):
        cfg = EncoderConfig(**image_encoder(vit, pooling=pooling))
        family = ENCODERS["hf-image"]
        prepared = family.prepare(cfg)(values)
        assert prepared.type.list_size == 3 and prepared.type.value_type.list_size == SIZE
        got = family.load(cfg, "cpu").forward(prepared)
        want = reference(vit, pil, "pooler" if pooling == "auto" else pooling)
        assert got.shape == (32, 384) and got.dtype == np.float32
        np.testing.assert_allclose(got, want, atol=1e-5)
        assert family.describe(cfg)["pooling"] == ("pooler" if pooling == "auto" else pooling)


def tower(kind: str, folder: Path) -> Path:
    """A tiny seeded model of `kind` and its image processor, saved in `folder`."""
    import torch
    import transformers as tf

    torch.manual_seed(0)
    vision = dict(image_size=SIZE, patch_size=8, hidden_size=32, num_hidden_layers=1,
                  num_attention_heads=2, intermediate_size=64)
    text = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    size = {"height": SIZE, "width": SIZE}
    model, processor = {
        "clip": lambda: (tf.CLIPModel(tf.CLIPConfig(vision_config=vision, text_config=text,
                                                    projection_dim=16)),
                         tf.CLIPImageProcessor(size={"shortest_edge": SIZE}, crop_size=size)),
        "siglip": lambda: (tf.SiglipModel(tf.SiglipConfig(vision_config=vision,
                                                          text_config=text)),
                           tf.SiglipImageProcessor(size=size)),
        "dinov2": lambda: (tf.Dinov2Model(tf.Dinov2Config(**vision)),
                           tf.BitImageProcessor(size={"shortest_edge": SIZE}, crop_size=size)),
        "convnext": lambda: (tf.ConvNextModel(tf.ConvNextConfig(hidden_sizes=[8, 16, 24, 32],
                                                                depths=[1, 1, 1, 1])),
                             tf.ConvNextImageProcessor(size={"shortest_edge": SIZE})),
    }[kind]()
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def test_clip_siglip_dinov2_and_convnext_folders_encode_as_the_model_does(digits, tmp_path):
    """auto pools as each model says: a CLIP-style folder's get_image_features, else the pooled
    output; mean of a ConvNeXt is that of its feature map."""
    import torch
    from PIL import Image
    from transformers import AutoImageProcessor, AutoModel

    values = pa.array(digits[0][:6], pa.binary())
    pil = [Image.open(io.BytesIO(b)).convert("RGB") for b in values.to_pylist()]
    family = ENCODERS["hf-image"]
    for kind, dim in (("clip", 16), ("siglip", 32), ("dinov2", 32), ("convnext", 32)):
        folder = tower(kind, tmp_path / kind)
        pixels = torch.from_numpy(AutoImageProcessor.from_pretrained(folder)(
            images=pil, return_tensors="np")["pixel_values"])
        model = AutoModel.from_pretrained(folder).eval()
        with torch.no_grad():
            if kind in ("clip", "siglip"):
                want = {"auto": model.get_image_features(pixel_values=pixels).pooler_output}
            else:
                out = model(pixel_values=pixels)
                want = {"auto": out.pooler_output, "mean": out.last_hidden_state.mean((2, 3))
                        if kind == "convnext" else out.last_hidden_state[:, 1:].mean(1)}
        for pooling, expected in want.items():
            cfg = EncoderConfig(**image_encoder(folder, pooling=pooling))
            got = family.load(cfg, "cpu").encode(values)
            assert got.shape == (6, dim) and family.describe(cfg)["dim"] == dim, kind
            np.testing.assert_allclose(got, expected.numpy(), atol=1e-5, err_msg=kind)
    with pytest.raises(EncoderError, match="a 'convnext' model has no CLS token; use pooler"):
        family.describe(EncoderConfig(**image_encoder(tmp_path / "convnext", pooling="cls")))


def test_a_vit_without_pooler_weights_pools_its_cls_token_and_refuses_a_random_pooler(
        vit, digits, tmp_path):
    import torch
    from transformers import ViTImageProcessor, ViTModel

    torch.manual_seed(1)
    ViTModel(ViTModel.config_class.from_pretrained(vit), add_pooling_layer=False) \
        .save_pretrained(tmp_path)
    ViTImageProcessor.from_pretrained(vit).save_pretrained(tmp_path)
    family, values = ENCODERS["hf-image"], pa.array(digits[0][:4])
    auto = EncoderConfig(**image_encoder(tmp_path))
    assert family.describe(auto)["pooling"] == "cls"
    cls = family.load(EncoderConfig(**image_encoder(tmp_path, pooling="cls")), "cpu")
    np.testing.assert_array_equal(family.load(auto, "cpu").encode(values), cls.encode(values))
    with pytest.raises(EncoderError, match=r"lacks weights \['pooler.dense.bias', 'pooler.dense"
                                           r".weight'\].*would be random.*or pooling cls or mean"):
        family.load(EncoderConfig(**image_encoder(tmp_path, pooling="pooler")), "cpu")


def test_the_fingerprint_follows_weights_preprocessor_and_pooling(vit, tmp_path):
    import shutil

    describe = ENCODERS["hf-image"].describe
    base = describe(EncoderConfig(**image_encoder(vit)))
    assert base["dim"] == 384 and base["normalize"] is False
    assert describe(EncoderConfig(**image_encoder(vit, pooling="mean"))) != base
    other = tmp_path / "vit"
    shutil.copytree(vit, other)
    assert describe(EncoderConfig(**image_encoder(other))) == base  # files, not the path
    config = json.loads((other / "preprocessor_config.json").read_text())
    (other / "preprocessor_config.json").write_text(json.dumps({**config, "image_mean": [0.4] * 3}))
    changed = describe(EncoderConfig(**image_encoder(other)))
    assert changed["preprocessor_digest"] != base["preprocessor_digest"]
    assert changed["weights_digest"] == base["weights_digest"]
    with pytest.raises(ConfigError, match=r"pooling='lasttoken': expected auto or one of "
                                          r"\['cls', 'mean', 'pooler', 'projection'\]"):
        raycache._core.config.load(EncoderConfig, image_encoder(vit, pooling="lasttoken"))
    with pytest.raises(EncoderError, match="needs a CLIP-style folder"):
        describe(EncoderConfig(**image_encoder(vit, pooling="projection")))


def test_image_fills_cut_blocks_to_256_mib_of_uint8_pixels_under_a_shard_too(vit, tmp_path):
    import shutil

    from raycache._fill.encode import block_rows
    from raycache._fill.plan import load_config

    big = tmp_path / "vit224"
    shutil.copytree(vit, big)
    config = json.loads((big / "preprocessor_config.json").read_text())
    config["size"] = {"height": 224, "width": 224}
    (big / "preprocessor_config.json").write_text(json.dumps(config))
    cfg = {"name": "images", "source": {"path": str(tmp_path)}, "store": {"uri": str(tmp_path)},
           "rows_per_shard": 256, "num_gpus": 1}
    per_row = 3 * 224 * 224  # uint8: a byte a channel of a pixel
    assert ENCODERS["hf-image"].input_bytes(EncoderConfig(**image_encoder(big))) == per_row
    blocks = block_rows(load_config({**cfg, "encoders": [image_encoder(big)]}), None, 1.0)
    assert blocks == (2**28 // per_row) // 256 * 256 == 1536  # not 65,536 rows: 9.2 GiB
    assert block_rows(load_config({**cfg, "encoders": [image_encoder(vit)]}), None, 1.0) == 65_536
    one = load_config({**cfg, "rows_per_shard": 8192, "encoders": [image_encoder(big)]})
    assert block_rows(one, None, 1.0) == 2**28 // per_row == 1783  # not a shard: 1.2 GiB
    assert block_rows(one, 10_000, 1.0) == 1250  # a fill's eighth, under the bytes


@pytest.fixture(scope="module")
def digit_folder(tmp_path_factory, digits) -> Path:
    """An image folder of the digits: one subfolder per digit, named after it."""
    root = tmp_path_factory.mktemp("digits")
    names = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
    for i, (data, label) in enumerate(zip(*digits, strict=True)):
        (root / names[label]).mkdir(exist_ok=True)
        (root / names[label] / f"{i:04d}.png").write_bytes(data)
    (root / "README.txt").write_text("not an image: left out")
    return root


def test_an_image_folder_fills_and_a_linear_head_learns_the_digits(vit, digit_folder, digits,
                                                                   tmp_path):
    store = str(tmp_path / "store")
    source = {"path": str(digit_folder), "format": "imagefolder",
              "options": {"api_token": "hunter2", "skip_instance_cache": True}}  # to the encoder
    cfg = {"name": "digits", "source": source, "encoders": [image_encoder(vit, pooling="mean")],
           "store": {"uri": store}, "rows_per_shard": 256, "in_process": True, "progress": False}
    filled = raycache.fill(cfg)
    manifest = filled.cache.manifest
    assert manifest.extra["encoder_configs"]["vit"]["options"] == {"skip_instance_cache": True}
    assert not [p for p in Path(store).rglob("*") if p.is_file() and b"hunter2" in p.read_bytes()]
    assert manifest.rows == 600 and filled.encoded_rows == 600
    stats = manifest.label_stats["label"]
    assert stats["classes"] == sorted(["zero", "one", "two", "three", "four", "five", "six",
                                       "seven", "eight", "nine"])
    table = filled.cache.read_table(columns=["id", "vit", "label"])
    ids = table.column("id").to_pylist()
    assert ids[0].count("/") == 1 and ids[0].endswith(".png")
    assert all(k.split("/")[0] == lab for k, lab in
               zip(ids, table.column("label").to_pylist(), strict=True))
    from PIL import Image

    some = sorted(ids)[:5]  # the cache holds the same embeddings as the model's own forward
    want = reference(vit, [Image.open(digit_folder / k).convert("RGB") for k in some], "mean")
    got = dict(zip(ids, table.column("vit").to_pylist(), strict=True))
    np.testing.assert_allclose(np.array([got[k] for k in some]), want, atol=1e-5)

    assert raycache.fill(cfg).hit  # the same files: the same cache
    (digit_folder / "zero" / "0000.png").write_bytes(png(np.eye(8) * 16))
    changed = raycache.fill(cfg)
    assert not changed.hit and changed.encoded_rows == 1  # a new version: the rest shared
    assert changed.shared_rows == 599 and changed.reused_rows == 0

    run = raycache.train({"cache": "digits", "store": {"uri": store}, "label": "label",
                          "num_workers": 0, "progress": False, "epochs": 30, "lr": 0.05})
    assert run.spec.head.class_names[0] == "eight"
    assert run.metrics["val_acc"] > 0.6, run.metrics  # chance is 0.1
    files = sorted(digit_folder.rglob("*.png"))[::15]  # the head on image paths: digit names
    predicted = raycache.load_head(run.checkpoint).predict([str(f) for f in files])
    assert np.mean([p == f.parent.name for p, f in zip(predicted, files, strict=True)]) > 0.6
    good, bad, path = replica_answers(run.checkpoint, files[:3])
    assert good == {"labels": list(predicted[:3])}
    assert isinstance(bad, BadInput) and bad.column == "image"
    assert "read_uris" in str(path)


def replica_answers(checkpoint: str, files: list[Path]) -> tuple:
    """What a served image head's replica (HeadServer, in this process) answers to `files` sent
    as base64 and data: URIs, batched with a request holding a corrupt image; and what it says
    to a request naming a path."""
    import base64
    import json

    from raycache._serve.app import HeadServer
    from raycache._serve.requests import BadRequest, parse

    server = HeadServer(checkpoint)
    b64 = [base64.b64encode(f.read_bytes()).decode() for f in files]
    good = {"inputs": [{"base64": b64[0]}] + [f"data:image/png;base64,{b}" for b in b64[1:]]}
    bad = {"inputs": [{"base64": base64.b64encode(b"not a png").decode()}]}
    queries = [parse(json.dumps(b).encode(), server.limits, server.columns, server.images)
               for b in (good, bad)]
    good_answer, bad_answer = server.answer_each(queries)
    good_answer.pop("probabilities")
    with pytest.raises(BadRequest) as refused:
        parse(json.dumps({"inputs": [str(files[0])]}).encode(), server.limits, server.columns,
              server.images)
    return good_answer, bad_answer, refused.value

def test_a_hugging_face_dataset_of_images_fills_by_its_image_feature(vit, digits, tmp_path):
    import datasets
    from PIL import Image

    names = [str(d) for d in range(10)]
    features = datasets.Features({"id": datasets.Value("string"), "image": datasets.Image(),
                                  "label": datasets.ClassLabel(names=names)})
    pil = [Image.open(io.BytesIO(b)) for b in digits[0][:40]]
    ds = datasets.Dataset.from_dict({"id": [f"d{i}" for i in range(40)], "image": pil,
                                     "label": digits[1][:40].tolist()}, features=features)
    filled = raycache.fill({"name": "hf-digits", "encoders": [image_encoder(vit)],
                            "source": {"data": ds, "key": "id", "labels": ["label"]},
                            "store": {"uri": str(tmp_path)}, "in_process": True,
                            "progress": False})
    table = filled.cache.read_table(columns=["id", "vit", "label"])
    got = dict(zip(table.column("id").to_pylist(), table.column("vit").to_pylist(), strict=True))
    want = reference(vit, [im.convert("RGB") for im in pil[:3]], "pooler")
    np.testing.assert_allclose(np.array([got[f"d{i}"] for i in range(3)]), want, atol=1e-5)
    assert filled.cache.manifest.label_stats["label"]["classes"] == names


def test_a_bad_image_names_its_row_and_what_it_holds(vit, digits, tmp_path):
    prepare = ENCODERS["hf-image"].prepare(EncoderConfig(**image_encoder(vit)))
    truncated = digits[0][3][: len(digits[0][3]) // 2]
    for column, why in ((pa.array([digits[0][0], b"not an image"]), "UnidentifiedImageError"),
                        (pa.array([digits[0][0], truncated]), "truncated"),
                        (pa.array([str(tmp_path / "missing.png")]), "FileNotFoundError")):
        with pytest.raises(BadInput, match=f"row [01] of this batch of column 'image'.*{why}"):
            prepare(column)

    images = pa.table({"id": [f"img-{i}" for i in range(4)],
                       "image": [*digits[0][:2], b"\x89PNG broken", digits[0][3]]})
    import pyarrow.parquet as pq

    (tmp_path / "src").mkdir()
    pq.write_table(images, tmp_path / "src" / "a.parquet")
    cfg = {"name": "bad", "source": {"path": str(tmp_path / "src")},
           "encoders": [image_encoder(vit)], "store": {"uri": str(tmp_path / "store")},
           "in_process": True, "progress": False}
    with pytest.raises(BadInput, match=r"b'\\x89PNG broken'.*not a readable image.*Fix or drop "
                                       r"that row.*the row with id='img-2', row 2 of .*a\.parquet"):
        raycache.fill(cfg)


def test_bad_images_are_skipped_listed_and_retried_with_on_bad_rows_skip(vit, digits,
                                                                          tmp_path):
    import pyarrow.parquet as pq

    broken = [b"\x89PNG broken", digits[0][3][: len(digits[0][3]) // 2]]
    images = pa.table({"id": [f"img-{i}" for i in range(6)],
                       "image": [digits[0][0], broken[0], digits[0][2], digits[0][3], broken[1],
                                 broken[0]]})  # blocks of 4 rows: the second all bad
    (tmp_path / "src").mkdir()
    pq.write_table(images, tmp_path / "src" / "a.parquet")
    cfg = {"name": "bad", "source": {"path": str(tmp_path / "src")},
           "encoders": [image_encoder(vit)], "store": {"uri": str(tmp_path / "store")},
           "in_process": True, "progress": False, "on_bad_rows": "skip", "rows_per_shard": 4}
    result = raycache.fill(cfg)
    m = result.cache.manifest
    assert [(s.key, s.row) for s in m.skipped] == [("img-1", 1), ("img-4", 4), ("img-5", 5)]
    assert all("not a readable image" in s.reason for s in m.skipped)
    table = result.cache.read_table()
    assert table.column("id").to_pylist() == ["img-0", "img-2", "img-3"]
    again = raycache.fill(cfg)  # not a hit: the skipped rows are tried again, and fail again
    assert again.retried == 3 and len(again.cache.manifest.skipped) == 3
    from PIL import Image

    want = reference(vit, [Image.open(io.BytesIO(digits[0][i])).convert("RGB")
                           for i in (0, 2, 3)], "pooler")
    np.testing.assert_allclose(np.stack(table.column("vit").to_numpy(zero_copy_only=False)),
                               want, atol=1e-5)


def test_an_image_folder_needs_a_subfolder_per_class(tmp_path, vit):
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "a.png").write_bytes(b"x")
    cfg = {"name": "flat", "source": {"path": str(tmp_path / "flat"), "format": "imagefolder"},
           "encoders": [image_encoder(vit)], "store": {"uri": str(tmp_path / "store")},
           "in_process": True, "progress": False}
    with pytest.raises(SourceError, match=r"images \['a.png'\] lie in the folder itself"):
        raycache.fill(cfg)


DRIVER = """
import json, sys
import ray
import raycache
ray.init(num_cpus=4, num_gpus=1, include_dashboard=False, log_to_driver=False)
result = raycache.fill(json.loads(sys.argv[1]))
print(json.dumps({"pool": result.pool, "encoded": result.encoded_rows}))
"""


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_the_gpu_shaped_image_fill_prepares_on_cpu_actors_and_encodes_on_gpu_ones(
        vit, digit_folder, tmp_path):
    """The GPU pipeline (read -> prepare actors -> encoder actors on logical GPUs -> write),
    with the models on the CPU (RAYCACHE_TEST_GPU_ON_CPU), or on a real GPU where one is."""
    import torch

    gpu = torch.cuda.is_available()
    cfg = {"name": "digits-gpu", "source": {"path": str(digit_folder), "format": "imagefolder"},
           "encoders": [image_encoder(vit, pooling="mean")],
           "store": {"uri": str(tmp_path / "store")}, "rows_per_shard": 200, "num_gpus": 1,
           "progress": False}
    env = {**os.environ, **({} if gpu else {GPU_ON_CPU: "1"})}
    done = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(cfg)], env=env,
                          capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    run = json.loads(done.stdout.splitlines()[-1])
    assert run["encoded"] == 600 and "1 GPU" in run["pool"], run
    table = raycache.open_cache("digits-gpu", str(tmp_path / "store")).read_table()
    from PIL import Image

    ids = sorted(table.column("id").to_pylist())[:4]
    want = reference(vit, [Image.open(digit_folder / k).convert("RGB") for k in ids], "mean")
    got = dict(zip(table.column("id").to_pylist(), table.column("vit").to_pylist(), strict=True))
    np.testing.assert_allclose(np.array([got[k] for k in ids]), want, atol=1e-4 if gpu else 1e-5)

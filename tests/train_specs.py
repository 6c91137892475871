"""Specs for training's unit tests, without a cache: a small head, a recipe and a WorkerSpec."""

from raycache._cache.store import Store
from raycache._core.config import load
from raycache._heads.specs import HeadSpec
from raycache._train.config import TrainConfig
from raycache._train.runspec import Recipe, WorkerSpec

HEAD = HeadSpec(head="linear", in_dim=4, num_classes=3, hidden=(), dropout=0.0,
                encoders=("e",), label="label", cache="c", fingerprint="f" * 24,
                encoder_configs={"e": {"name": "e", "kind": "torch", "input": "x"}},
                weights_digests={"e": "d" * 64})


def recipe(**over) -> Recipe:
    return Recipe.from_config(load(TrainConfig, {"cache": "c", **over}))


def spec(tmp_path, **over) -> WorkerSpec:
    return WorkerSpec.of(head=HEAD, recipe=recipe(**over), run_name="r", key="id", rows=64,
                   placement="cpu", num_workers=0, use_gpu=False, class_weights=None,
                   store=Store(str(tmp_path)), shards=(), run_dir=str(tmp_path / "run"),
                   checkpoint_every=0, checkpoint_seconds=0, prefetch_batches=1, progress=False)

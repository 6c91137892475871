"""Similarity objectives through raycache.train on a filled cache, in-process (Ray Train local
mode): group ids from the label column, retrieval metrics per epoch, a loss with learnable
parts (ArcFace) checkpointed with the run, and a head that loads without Ray."""

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

import raycache
from raycache import RaycacheError
from raycache._heads.specs import HeadSpec
from tests.conftest import separable, toy_fill

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def store(ray_session, tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("objectives")
    (root / "source").mkdir()
    pq.write_table(separable(n=400, classes=6), root / "source" / "a.parquet")
    raycache.fill(toy_fill(str(root / "source"), str(root / "store")))
    return str(root / "store")


def test_groups_objective_trains_in_process_and_reports_retrieval(store):
    run = raycache.train({
        "cache": "toy", "store": {"uri": store}, "objective": "groups", "epochs": 3,
        "groups": {"loss": "arcface"}, "embedding_dim": 8, "normalize": True, "head": "skip",
        "hidden": [16], "lr": 0.02, "batch_size": 64, "num_workers": 0, "progress": False,
        "monitor": "val_map_at_5", "metrics_k": [1, 5]})
    m = run.metrics
    assert run.spec.recipe.evaluation.mode == "max"
    assert run.history[-1]["train_loss"] < run.history[0]["train_loss"]
    assert m["val_map_at_5"] > 0.8 and m["val_acc"] == m["val_precision_at_1"] > 0.8
    head = run.load_head()
    assert head.spec.objective == "groups" and head.spec.width == 8 and head.spec.num_classes == 6
    out = head.model(torch.randn(3, run.spec.head.in_dim))
    assert out.shape == (3, 8) and torch.allclose(out.norm(dim=1), torch.ones(3))
    # search with the trained head: raw inputs -> frozen encoder (live) -> head embeddings
    new = separable(n=400, classes=6, seed=0).slice(0, 60)  # same groups as the cache
    vectors = head.embed(new.column("features").to_pylist())
    assert vectors.shape == (60, 8) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    cached = raycache.open_cache("toy", store).read_table().slice(0, 60)
    x = np.stack(cached.column("proj").to_numpy(zero_copy_only=False))
    assert np.allclose(head.embed_embeddings(x), vectors, atol=1e-5)  # the same as from cache
    sims = vectors @ vectors.T
    np.fill_diagonal(sims, -np.inf)
    labels = new.column("label").to_numpy()
    assert (labels[sims.argmax(1)] == labels).mean() > 0.8  # nearest neighbour: same group
    with pytest.raises(RaycacheError, match="Head.embed"):
        head.predict(new.column("features").to_pylist())
    state = torch.load(Path(run.checkpoint) / "state.pt", weights_only=False)
    assert state["criterion"]["W"].shape == (8, 6)  # ArcFace's class centres, kept to resume
    record = json.loads((Path(run.spec.run_dir) / "run.json").read_text())
    assert record["recipe"]["groups"]["loss"] == "arcface"


def test_a_version_1_head_json_still_loads_as_a_classifier(store):
    run = raycache.train({"cache": "toy", "store": {"uri": store}, "epochs": 1,
                          "num_workers": 0, "progress": False})
    assert {"val_f1", "val_top5_acc"} <= set(run.metrics)
    saved = json.loads((Path(run.checkpoint) / "head.json").read_text())["head"]
    old = {k: v for k, v in saved.items() if k not in ("objective", "out_dim", "normalize")}
    spec = HeadSpec.from_dict({**old, "format_version": 1})
    assert spec.objective == "classification" and spec.width == spec.num_classes == 6

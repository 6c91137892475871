"""An mlp head standardises its inputs inside itself: the training rows' mean and standard
deviation set before its first step, saved with its weights (so predict, export and serve need
nothing more); an mlp head saved before that loads and predicts as it did."""

import json
from types import SimpleNamespace

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

import raycache
from raycache._heads.modules import standardized
from raycache._heads.specs import HeadSpec, build_head
from raycache._heads.weights import encode
from raycache._train.data.in_memory import InMemory
from raycache._train.driver.checks import load_config as load_train
from raycache._train.driver.plan import prepare
from raycache._train.worker.input_stats import moments
from tests.conftest import separable, toy_fill

SPEC = HeadSpec(head="mlp", in_dim=6, num_classes=3, hidden=(8,), dropout=0.0,
                encoders=("e",), label="y", cache="c", fingerprint="f")


def saved(folder, spec: HeadSpec, model: torch.nn.Module) -> str:
    """A checkpoint folder as training writes one: head.json and head.safetensors."""
    folder.mkdir()
    (folder / "head.json").write_text(json.dumps({"head": spec.to_dict(), "metrics": {}}))
    (folder / "head.safetensors").write_bytes(encode(model.state_dict()))
    return str(folder)


def test_moments_are_the_rows_mean_and_std_and_a_constant_feature_keeps_scale_1():
    x = torch.randn(1000, 5, dtype=torch.float64) * torch.tensor([1.0, 3, 0.1, 5, 0]) + 40
    mean, sd = moments(SimpleNamespace(x=x.float()), 5, torch.device("cpu"))
    torch.testing.assert_close(mean, x.mean(0).float())
    want = x.std(0, correction=0).float()
    want[4] = 1.0  # the constant column: its scale stays 1 (no division by ~0)
    torch.testing.assert_close(sd, want, rtol=1e-5, atol=1e-6)
    # read in batches (streamed shares, pairs [n, 2, dim]): the same moments
    streamed = SimpleNamespace(batches=lambda size, seed: ((x[i:i + 300].float().view(-1, 1, 5),
                                                            None) for i in range(0, 1000, 300)))
    again = moments(streamed, 5, torch.device("cpu"))
    torch.testing.assert_close(again[0], mean)
    torch.testing.assert_close(again[1], sd)
    empty = moments(SimpleNamespace(x=torch.empty(0, 5)), 5, torch.device("cpu"))
    assert torch.equal(empty[0], torch.zeros(5)) and torch.equal(empty[1], torch.ones(5))


def test_an_mlp_head_saved_before_standardisation_loads_and_predicts_as_it_did(tmp_path):
    torch.manual_seed(0)
    old = build_head(SPEC)  # what raycache built and saved before: a plain Sequential
    assert "standardize" not in SPEC.to_dict() and "0.weight" in old.state_dict()
    head = raycache.load_head(saved(tmp_path / "old", SPEC, old))
    assert not head.spec.standardize and standardized(head.model) is None
    x = np.random.default_rng(0).normal(size=(7, 6)).astype(np.float32)
    with torch.no_grad():
        want = old(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(head.logits(x), want, rtol=1e-6)


def test_a_standardised_head_keeps_its_mean_and_scale_in_its_weights(tmp_path):
    spec = HeadSpec(**{**SPEC.__dict__, "standardize": True})
    assert spec.to_dict()["standardize"] is True
    assert HeadSpec.from_dict(spec.to_dict()) == spec
    torch.manual_seed(0)
    model = build_head(spec)
    layer = standardized(model)
    layer.mean.copy_(torch.arange(6.0))
    layer.scale.copy_(torch.linspace(0.5, 3, 6))
    head = raycache.load_head(saved(tmp_path / "new", spec, model))
    x = np.random.default_rng(1).normal(size=(4, 6)).astype(np.float32) * 3
    with torch.no_grad():
        want = layer.inner((torch.from_numpy(x) - layer.mean) / layer.scale).numpy()
    np.testing.assert_allclose(head.logits(x), want, rtol=1e-6)


@pytest.mark.timeout(300)
def test_training_sets_an_mlp_heads_statistics_from_its_training_rows(tmp_path):
    (tmp_path / "source").mkdir()
    pq.write_table(separable(300), tmp_path / "source" / "a.parquet")
    store = str(tmp_path / "store")
    raycache.fill(toy_fill(str(tmp_path / "source"), store, in_process=True))
    common = {"cache": "toy", "store": {"uri": store}, "num_workers": 0, "progress": False,
              "epochs": 1}
    run = raycache.train({**common, "head": "mlp", "hidden": [8]})
    head = run.load_head()
    layer = standardized(head.model)
    assert head.spec.standardize and layer is not None
    _, spec = prepare(load_train({**common, "head": "mlp", "hidden": [8]}))  # the worker's
    train, val = InMemory.for_worker(spec, 0, torch.device("cpu"))
    assert len(train) + len(val) == 300 and len(val) > 0
    torch.testing.assert_close(layer.mean, train.x.mean(0))  # the training rows', never val's
    torch.testing.assert_close(layer.scale, train.x.std(0, correction=0))
    linear = raycache.train({**common, "head": "linear", "optim": {"solver": "gradient"}})
    assert not linear.load_head().spec.standardize
    assert standardized(linear.load_head().model) is None

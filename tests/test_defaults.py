"""The training defaults: a run with none of its settings given reaches a logistic regression's
accuracy (a linear classifier solved by L-BFGS, served and returned as any head; the solver
chosen from the run and the settings given), stops on a plateau or at its cap, serves its best
epoch's weights and names them, and resumes to where an uninterrupted run ends."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file

import raycache
from raycache import ConfigError
from raycache._core.config import load
from raycache._train.config import TrainConfig
from raycache._train.runspec import Recipe
from tests.conftest import killed_after_epoch, toy_fill

pytestmark = [pytest.mark.timeout(600)]

FORMER = {"loop": {"epochs": 10, "batch_size": 256}, "optim": {"lr": 1e-3},
          "evaluation": {"early_stopping": False, "weights": "last"}}
"""The defaults before issue 34, spelled out."""


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """2,000 rows of 6 overlapping classes (5% of the labels flipped) through the toy
    projection, filled in this process."""
    from sklearn.datasets import make_classification

    x, y = make_classification(n_samples=2000, n_features=8, n_informative=6, n_redundant=0,
                               n_classes=6, n_clusters_per_class=1, flip_y=0.05,
                               class_sep=1.2, random_state=0)
    root = tmp_path_factory.mktemp("defaults")
    (root / "source").mkdir()
    pq.write_table(pa.table({
        "id": [f"row-{i:05d}" for i in range(len(y))],
        "features": pa.FixedSizeListArray.from_arrays(pa.array(x.astype(np.float32).ravel()), 8),
        "label": pa.array(y, pa.int64()), "name": [f"c{c}" for c in y]}),
        root / "source" / "a.parquet")
    raycache.fill(toy_fill(str(root / "source"), str(root / "store"), in_process=True,
                           rows_per_shard=1000))
    return str(root / "store")


def train(store: str, **over):
    return raycache.train({"cache": "toy", "store": {"uri": store}, "label": "label",
                           "progress": False, **over})


def logreg_accuracy(run, oracle: bool = False) -> float:
    """scikit-learn's LogisticRegression on the run's features and split, its C chosen by
    5-fold cross-validation of the training rows (as honestly as the solved head chooses its
    own: never on the validation rows); `oracle`: its best C on the validation rows."""
    from sklearn.linear_model import LogisticRegression, LogisticRegressionCV

    t = run.cache.read_table(columns=["id", "proj", "label"])
    x = np.stack(t.column("proj").to_numpy(zero_copy_only=False))
    y, val = t.column("label").to_numpy(), run.held_out(t.column("id"))
    cs = (0.01, 0.1, 1, 10, 100)
    if oracle:
        return max(float((LogisticRegression(C=c, max_iter=3000).fit(x[~val], y[~val])
                          .predict(x[val]) == y[val]).mean()) for c in cs)
    model = LogisticRegressionCV(Cs=list(cs), cv=5, max_iter=3000).fit(x[~val], y[~val])
    return float((model.predict(x[val]) == y[val]).mean())


def test_the_defaults_reach_a_logistic_regressions_accuracy(store):
    run = train(store)
    assert run.spec.recipe.optim.solver == "lbfgs" and len(run.history) == 1
    reference = logreg_accuracy(run)
    got = run.served_metrics()["val_acc"]
    assert got >= reference - 0.005, (got, reference)
    assert got <= logreg_accuracy(run, oracle=True) + 0.005  # C was not chosen on these rows
    assert "solved by L-BFGS" in run.summary() and f"C={run.metrics['l2_C']:g}" in run.summary()
    former = train(store, **FORMER)
    assert former.spec.recipe.optim.solver == "gradient"  # its settings are the gradient path's
    assert former.metrics["val_acc"] < reference - 0.02  # what the old defaults reached
    epochs = train(store, optim={"solver": "gradient"})  # epochs: auto, lr: auto
    assert epochs.spec.recipe.loop.epochs == 50 and len(epochs.history) < 50  # it stopped
    assert epochs.served_metrics()["val_acc"] >= reference - 0.01
    mlp = train(store, head="mlp")
    assert mlp.spec.recipe.optim.solver == "gradient"
    assert mlp.served_metrics()["val_acc"] >= got - 0.005, (mlp.served_metrics(), got)


def test_a_solved_head_is_served_loaded_and_returned_as_any_head(store):
    run = train(store, run_name="solved")
    folder = Path(run.checkpoint)
    assert json.loads((folder / "head.json").read_text())["head"]["head"] == "linear"
    t = run.cache.read_table(columns=["id", "proj", "label"])
    val = run.held_out(t.column("id"))
    x = np.stack(t.column("proj").to_numpy(zero_copy_only=False))[val]
    head = run.load_head()
    accuracy = float((head.predict_ids(x) == t.column("label").to_numpy()[val]).mean())
    assert accuracy == pytest.approx(run.served_metrics()["val_acc"], abs=1e-9)
    weights = load_file(folder / "head.safetensors")
    assert set(weights) == {"1.weight", "1.bias"}  # a plain linear head on the raw features
    again = train(store, run_name="solved")  # finished: returned, not solved again
    assert again.finished_before and again.checkpoint == run.checkpoint
    other = train(store, run_name="solved-again")  # the solve is deterministic
    for k, v in load_file(Path(other.checkpoint) / "head.safetensors").items():
        assert torch.equal(v, weights[k])


def test_the_solver_is_chosen_from_the_run_and_the_settings_given():
    from raycache._heads.specs import HeadSpec
    from raycache._train.defaults import gradient_settings, resolve_solver

    head = HeadSpec(head="linear", in_dim=8, num_classes=6, hidden=(), dropout=0.0,
                    encoders=("e",), label="label", cache="c", fingerprint="f" * 24)

    def solver(over=None, rows=2000, workers=0, placement="cpu", views=0, overlap="", h=head):
        cfg = load(TrainConfig, {"cache": "c", **(over or {})})
        recipe = Recipe.from_config(cfg, rows, workers, 10.0)
        out = resolve_solver(cfg, recipe, h, rows, workers, placement, views, overlap)
        return out.optim.solver, out.loop.epochs

    assert solver() == ("lbfgs", 1)  # fits in memory, nothing of the gradient path given
    for given in ({"optim": {"lr": 0.01}}, {"optim": {"optimizer": "sgd"}},
                  {"loop": {"epochs": 7}}, {"loop": {"batch_size": 64}},
                  {"schedule": {"kind": "cosine"}}, {"optim": {"solver": "gradient"}}):
        assert solver(given)[0] == "gradient", given
    assert gradient_settings(load(TrainConfig, {"cache": "c", "optim": {"lr": 0.01}})) == [
        "optim.lr"]
    assert solver(workers=2)[0] == solver(placement="stream")[0] == "gradient"
    assert solver(views=2)[0] == solver(overlap="a fill under way")[0] == "gradient"
    assert solver({"sweep": {"optim.lr": [0.01, 0.1]}})[0] == "gradient"
    assert solver(rows=10**9)[0] == "gradient"  # its working memory would not fit
    mlp = dataclasses.replace(head, head="mlp", hidden=(16,))
    assert solver({"head": "mlp"}, h=mlp)[0] == "gradient"
    assert solver({"optim": {"solver": "lbfgs", "lr": 0.01}}) == ("lbfgs", 1)
    with pytest.raises(ConfigError, match="solver=lbfgs: it runs in one process"):
        solver({"optim": {"solver": "lbfgs"}}, workers=2)


def test_auto_epochs_stop_on_a_plateau_and_at_the_cap(store):
    run = train(store, run_name="plateau", optim={"solver": "gradient"})
    ev, loop = run.spec.recipe.evaluation, run.spec.recipe.loop
    assert ev.monitor == "val_acc"  # a classifier stops on the metric it reports
    accs = [m["val_acc"] for m in run.history]
    best = accs.index(max(accs)) + 1
    assert ev.early_stopping and len(run.history) == max(best + ev.patience, loop.min_epochs)
    assert run.weights_epoch == best and run.weights == "best"
    capped = train(store, loop={"max_epochs": 3, "min_epochs": 2}, optim={"lr": 1e-3})
    assert len(capped.history) == 3 and capped.spec.recipe.loop.epochs == 3
    fixed = train(store, loop={"epochs": 4})  # a number: no early stopping, as before
    assert not fixed.spec.recipe.evaluation.early_stopping and len(fixed.history) == 4


def test_the_best_epochs_weights_are_served_and_named(store):
    over = {"head": "mlp", "hidden": [64], "loop": {"epochs": 8, "batch_size": 64},
            "optim": {"lr": 0.05}}  # too large a step: validation worsens after a while
    run = train(store, **over)
    accs = [m["val_acc"] for m in run.history]
    best = accs.index(max(accs)) + 1
    assert best < len(run.history) == 8  # the best epoch is not the last
    assert run.weights == "best" and run.weights_epoch == best
    assert f"the checkpoint holds epoch {best}'s weights" in run.summary()
    folder = Path(run.checkpoint)
    state = torch.load(folder / "state.pt", weights_only=False)
    head = load_file(folder / "head.safetensors")
    for k, v in state["best_weights"].items():
        torch.testing.assert_close(head[k], v)
    assert any(not torch.equal(head[k], state["model"][k]) for k in head)  # last kept too
    assert json.loads((folder / "head.json").read_text())["weights_epoch"] == best
    t = run.cache.read_table(columns=["id", "proj", "label"])
    val = run.held_out(t.column("id"))
    x = np.stack(t.column("proj").to_numpy(zero_copy_only=False))[val]
    predicted = run.load_head().predict_ids(x)  # what load_head serves: the best epoch
    accuracy = float((predicted == t.column("label").to_numpy()[val]).mean())
    assert accuracy == pytest.approx(run.served_metrics()["val_acc"], abs=1e-9)
    assert accuracy != pytest.approx(run.metrics["val_acc"], abs=1e-9)
    last = train(store, **{**over, "evaluation": {"weights": "last"}})
    assert last.weights == "last" and last.weights_epoch == 8
    assert "epoch 8's weights, the last" in last.summary()
    for k, v in torch.load(Path(last.checkpoint) / "state.pt", weights_only=False)[
            "model"].items():
        torch.testing.assert_close(load_file(Path(last.checkpoint) / "head.safetensors")[k], v)


def test_a_resumed_run_ends_where_an_uninterrupted_one_does(store):
    whole = train(store, run_name="whole", optim={"solver": "gradient"})
    config = {"run_name": "cut", "checkpoints": {"every": 1, "max_failures": 0},
              "optim": {"solver": "gradient"}}
    with killed_after_epoch(3), pytest.raises(Exception, match="killed after epoch 3"):
        train(store, **config)
    resumed = train(store, **config)
    assert resumed.resumed_from == [3] and resumed.first_epoch == 3
    assert len(resumed.history) == len(whole.history)
    for a, b in zip(resumed.history, whole.history, strict=True):
        assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-6)
    assert resumed.weights_epoch == whole.weights_epoch
    again = train(store, **config)
    assert again.finished_before and again.weights_epoch == whole.weights_epoch


def test_auto_settings_resolve_per_head_and_sweeps_take_them_as_their_base():
    from raycache._heads.specs import HeadSpec
    from raycache._train.defaults import LINEAR_LR, LINEAR_STEP
    from raycache._train.driver.plan import sweep_members

    def recipe(rows=None, l1=None, **over):
        return Recipe.from_config(load(TrainConfig, {"cache": "c", **over}), rows, 0, l1)

    linear, mlp = recipe(), recipe(head="mlp")
    assert linear.optim.lr == LINEAR_LR and mlp.optim.lr == 1e-3
    assert recipe(objective="groups").optim.lr == 1e-3
    assert recipe(l1=15.0).optim.lr == pytest.approx(LINEAR_STEP / 15.0, rel=1e-2)
    assert recipe(l1=150.0).optim.lr == pytest.approx(LINEAR_STEP / 150.0, rel=1e-2)
    assert linear.loop.batch_size == 256 and linear.loop.epochs == 50
    assert linear.evaluation.early_stopping and linear.evaluation.weights == "best"
    assert recipe(rows=2000).loop.batch_size == 32  # ~50 steps an epoch of 1,600 rows
    assert recipe(rows=20_000).loop.batch_size == 256
    fixed = recipe(loop={"epochs": 7, "batch_size": 64}, optim={"lr": 0.2})
    assert (fixed.loop.epochs, fixed.loop.batch_size, fixed.optim.lr) == (7, 64, 0.2)
    assert not fixed.evaluation.early_stopping
    cfg = load(TrainConfig, {"cache": "c", "sweep": {"head": ["linear", "mlp"]}})
    head = HeadSpec(head="linear", in_dim=4, num_classes=2, hidden=(), dropout=0.0,
                    encoders=("e",), label="label", cache="c", fingerprint="f" * 24)
    members = sweep_members(cfg, head, 2000, 0, 15.0)
    assert [m.recipe.optim.lr for m in members] == [recipe(2000, 15.0).optim.lr, 1e-3]
    assert {m.recipe.loop.batch_size for m in members} == {32}

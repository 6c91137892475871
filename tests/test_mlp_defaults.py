"""The default mlp starts as the solved linear head (its weights hold the linear solution, which
GELU(z) - GELU(-z) = z carries through its hidden layers), the solve its first epoch, so the
epoch it serves scores at least what the linear head scores; the mlp a probe adds by itself
is one such head, while `methods: [mlp]` trains the full sweep. In-process: no Ray."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import raycache
from raycache._heads.linear_start import place_linear, starts_linear
from raycache._heads.specs import HeadSpec, build_head
from raycache._probe.config import ProbeConfig
from raycache._probe.heads import SWEEPS, train_config
from raycache._train.defaults import HIDDEN, WIDTHS
from tests.conftest import toy_fill

pytestmark = [pytest.mark.timeout(120)]


def spec(hidden: tuple[int, ...], classes: int = 3, dim: int = 6) -> HeadSpec:
    return HeadSpec(head="mlp", in_dim=dim, num_classes=classes, hidden=hidden, dropout=0.0,
                    encoders=("e",), label="label", cache="c", fingerprint="f",
                    standardize=True, linear_start=True)


@pytest.mark.parametrize("hidden", [(8,), (16, 6)])
def test_an_mlp_started_linear_predicts_the_linear_heads_logits(hidden):
    torch.manual_seed(0)
    head = build_head(spec(hidden))
    with torch.no_grad():  # a standardisation that is not the identity
        head.mean.copy_(torch.randn(6))
        head.scale.copy_(torch.rand(6) + 0.5)
    w, b, x = torch.randn(6, 3), torch.randn(3), torch.randn(50, 6) * 3
    assert not torch.allclose(head(x), x @ w + b, atol=1e-3)  # at random before
    place_linear(head, w, b)
    torch.testing.assert_close(head(x), x @ w + b, atol=1e-4, rtol=1e-4)
    assert torch.equal(head(x).argmax(1), (x @ w + b).argmax(1))
    last = head.inner[-1]
    assert int((last.weight != 0).sum()) == 2 * 3  # only the pass-through units are read


def test_an_mlp_too_narrow_for_its_classes_does_not_start_linear():
    assert starts_linear("mlp", "classification", 3, [6])
    assert not starts_linear("mlp", "classification", 4, [6])  # 2 x 4 > 6
    assert not starts_linear("mlp", "groups", 3, [256])
    assert not starts_linear("mlp", "classification", 3, [256], trainable=True)
    assert not starts_linear("linear", "classification", 3, [256])
    with pytest.raises(ValueError, match="hidden widths >= 8"):
        place_linear(build_head(spec((6,), classes=4)), torch.randn(6, 4), torch.randn(4))


def test_an_overlaps_rows_keep_the_mlp_at_random_and_the_source_says_why():
    from types import SimpleNamespace

    from raycache._train.data.in_memory import InMemory
    from raycache._train.data.overlap import OverlapRows
    from raycache._train.worker.warm import why_not

    heads = SimpleNamespace(members=[SimpleNamespace(spec=SimpleNamespace(head=spec((8,))))],
                            spec=SimpleNamespace(world=1))
    whole = InMemory(torch.randn(10, 6), torch.zeros(10, dtype=torch.int64))
    assert whole.overlap == "" and why_not(heads, whole) is None
    rows = OverlapRows(None, lambda: None, None, 0, False)  # type: ignore[arg-type]
    assert rows.overlap and why_not(heads, rows) == (
        f"the solve needs every row, and {rows.overlap}")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """600 rows of 4 overlapping classes through the toy projection, filled in this process."""
    from sklearn.datasets import make_classification

    x, y = make_classification(n_samples=600, n_features=8, n_informative=6, n_redundant=0,
                               n_classes=4, n_clusters_per_class=1, flip_y=0.05,
                               class_sep=0.8, random_state=0)
    root = tmp_path_factory.mktemp("mlp")
    (root / "source").mkdir()
    pq.write_table(pa.table({
        "id": [f"row-{i:05d}" for i in range(len(y))],
        "features": pa.FixedSizeListArray.from_arrays(pa.array(x.astype(np.float32).ravel()), 8),
        "label": pa.array(y, pa.int64()), "name": [f"c{c}" for c in y]}),
        root / "source" / "a.parquet")
    raycache.fill(toy_fill(str(root / "source"), str(root / "store"), in_process=True))
    return str(root / "store")


def test_the_default_mlp_starts_as_the_linear_head_and_serves_no_worse(store):
    base = {"cache": "toy", "store": {"uri": store}, "label": "label", "progress": False}
    linear = raycache.train({**base, "head": "linear"})
    mlp = raycache.train({**base, "head": "mlp", "loop": {"epochs": 4}})
    first, solved = mlp.history[0], linear.history[0]
    assert first["start"] == "linear (L-BFGS)" and first["lr"] == 0.0
    assert first["l2_C"] == solved["l2_C"]  # the same solve
    assert first["val_acc"] == solved["val_acc"]
    assert first["val_loss"] == pytest.approx(solved["val_loss"], rel=1e-4)
    assert len(mlp.history) == 4  # the solve, then three epochs of steps
    assert mlp.served_metrics()["val_acc"] >= linear.served_metrics()["val_acc"]
    assert mlp.spec.head.linear_start and not linear.spec.head.linear_start


def test_the_probes_own_mlp_is_one_default_head_and_a_named_mlp_the_sweep():
    left_out = train_config(ProbeConfig(caches=["c"]), "c", None, "e", "mlp")
    assert left_out["head"] == "mlp" and "sweep" not in left_out
    assert left_out["hidden"] == HIDDEN  # one width, where hidden auto would train two
    named = train_config(ProbeConfig(caches=["c"], methods=["logreg", "mlp"]), "c", None, "e",
                         "mlp")
    assert named["sweep"] == SWEEPS["mlp"] and len(SWEEPS["mlp"]["hidden"]) > 1
    given = train_config(ProbeConfig(caches=["c"], mlp=raycache.ProbeHeadsConfig(
        sweep={"hidden": [[64]]})), "c", None, "e", "mlp")
    assert given["sweep"] == {"hidden": [[64]]}  # a sweep given is trained as given


def test_hidden_auto_trains_both_widths_in_one_pass_and_serves_the_better(store):
    base = {"cache": "toy", "store": {"uri": store}, "label": "label", "progress": False,
            "head": "mlp", "loop": {"epochs": 3}}
    mlp = raycache.train(base)
    widths = [row["settings"]["hidden"] for row in mlp.sweep]
    assert widths == [list(w) for w in WIDTHS]
    best = max(mlp.sweep, key=lambda row: row["val_acc"])
    assert mlp.best["settings"] == best["settings"]
    assert mlp.served_metrics()["val_acc"] == best["val_acc"]
    lone = {w[0]: raycache.train({**base, "hidden": list(w)}) for w in WIDTHS}
    for row in mlp.sweep:  # each width as it trains alone: the same batches, start and steps
        alone = lone[row["settings"]["hidden"][0]]
        assert not alone.sweep
        assert row["val_acc"] == alone.served_metrics()["val_acc"]
    served = raycache.load_head(mlp.checkpoint)
    assert list(served.spec.hidden) == best["settings"]["hidden"]
    assert "selected member" in mlp.summary() and "hidden=" in mlp.summary()
    # what a user who asked for `head: mlp` reads: an mlp's widths, in the summary and the runs
    assert mlp.summary().startswith("train sweep of 2 mlp heads over hidden on toy/")
    from raycache._train.folder.record import list_runs

    listed = {r.name: r.head for r in list_runs(raycache.open_cache("toy", store))}
    assert listed[mlp.spec.run_name] == "sweep of 2 mlp heads over hidden"


@pytest.mark.parametrize(("over", "hidden", "sweep"), [
    ({"head": "mlp"}, HIDDEN, {"hidden": [list(w) for w in WIDTHS]}),
    ({"head": "mlp", "hidden": [64]}, [64], {}),  # a width given is trained alone
    ({"head": "linear"}, HIDDEN, {}),
    ({"head": "mlp", "objective": "groups"}, HIDDEN, {}),  # a classifier's choice only
    ({"head": "mlp", "sweep": {"optim.lr": [1e-3, 3e-3]}}, HIDDEN, {"optim.lr": [1e-3, 3e-3]}),
])
def test_hidden_auto_is_two_widths_for_an_mlp_classifier_alone(over, hidden, sweep):
    from raycache._core.config import load
    from raycache._train.config import TrainConfig
    from raycache._train.defaults import resolve_hidden

    cfg = resolve_hidden(load(TrainConfig, {"cache": "c", **over}), trainable=False)
    assert (cfg.hidden, cfg.sweep) == (hidden, sweep)
    if over == {"head": "mlp"}:  # trainable encoders train one head a run
        assert resolve_hidden(load(TrainConfig, {"cache": "c", **over}), True).sweep == {}

"""objective: pairs: each pair loss learns similarities hidden in noise (the loss falls, the
validation correlation or AUC rises well above the untrained head's random projection), the
pair metrics equal torchmetrics', the symmetric MNR equals sentence-transformers' definition,
and, through raycache.train on a filled cache (no Ray), the join by key, the split and a bad
key's error."""

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import raycache
from raycache import ConfigError
from raycache._cache.store import Store
from raycache._heads.specs import HeadSpec
from raycache._train.driver.checks import load_config as load_train
from raycache._train.objectives.pair_table import PairPart
from raycache._train.objectives.pairs import Pairs
from raycache._train.runspec import Recipe, WorkerSpec
from tests.conftest import separable, toy_fill

DIM, GROUPS, SIGNAL = 32, 8, 4


@pytest.fixture(autouse=True)
def one_thread():
    """Small tensors: one thread is faster, and leaves the other core alone."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def items(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Items whose group shows in SIGNAL dims only, drowned in 28 dims of wider noise."""
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(GROUPS, SIGNAL, generator=torch.Generator().manual_seed(99)) * 2
    group = torch.randint(0, GROUPS, (n,), generator=g)
    x = torch.randn(n, DIM, generator=g) * 3
    x[:, :SIGNAL] = centers[group] + 0.3 * torch.randn(n, SIGNAL, generator=g)
    return x, group


def views(n: int, seed: int) -> PairPart:
    """n positive pairs: two views of each of n items, alike in SIGNAL dims (each item its own
    point there), each drowned in its own noise: only a head that keeps the signal finds a
    view's partner among every other item's."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, SIGNAL, generator=g) * 2
    x = torch.randn(2 * n, DIM, generator=g) * 3
    x[:, :SIGNAL] = torch.cat([z, z]) + 0.1 * torch.randn(2 * n, SIGNAL, generator=g)
    rows = torch.stack([torch.arange(n), torch.arange(n, 2 * n)], dim=1)
    y = torch.cat([torch.ones(n, 1, dtype=torch.float64), rows.double()], dim=1)
    return PairPart(x, rows, y)


def pair_part(n_items: int, n_pairs: int, seed: int, target: str) -> PairPart:
    """Random pairs of items scored by the truth: 0/1 same group ("label"), or the cosine of
    their signal dims ("score"); two views of an item ("positive": views())."""
    if target == "positive":
        return views(n_pairs // 2, seed)
    x, group = items(n_items, seed)
    g = torch.Generator().manual_seed(seed + 1)
    left = torch.randint(0, n_items, (n_pairs,), generator=g)
    right = torch.randint(0, n_items, (n_pairs,), generator=g)
    half = n_pairs // 2  # half of the pairs from one group, so both labels are common
    for i in range(half):
        mates = torch.nonzero(group == group[left[i]]).flatten()
        right[i] = mates[torch.randint(0, len(mates), (1,), generator=g)]
    same = (group[left] == group[right]).double()
    cos = torch.nn.functional.cosine_similarity(x[left, :SIGNAL], x[right, :SIGNAL]).double()
    y = torch.stack([same if target == "label" else cos, left.double(), right.double()], dim=1)
    return PairPart(x, torch.stack([left, right], dim=1), y)


def run_spec(tmp_path, pairs: dict, **over) -> WorkerSpec:
    cfg = load_train({"cache": "c", "objective": "pairs", "lr": 0.01, "batch_size": 64,
                             "pairs": {"path": "unused.parquet", **pairs}, **over})
    head = HeadSpec(head="linear", in_dim=DIM, num_classes=0, hidden=(), dropout=0.0,
                    encoders=("e",), label="", cache="c", fingerprint="f" * 24,
                    objective="pairs", out_dim=16)
    return WorkerSpec.of(head=head, recipe=Recipe.from_config(cfg), run_name="r", key="id",
                   rows=600, placement="cpu", num_workers=0, use_gpu=False, class_weights=None,
                   store=Store(str(tmp_path)), shards=(), run_dir=str(tmp_path / "run"),
                   checkpoint_every=0, checkpoint_seconds=0, prefetch_batches=1,
                   progress=False)


LEARNERS = [  # (pairs settings, table, the metric that must rise above 0.7, lr)
    ({"loss": "cosine"}, "score", "val_spearman", 0.01),
    ({"loss": "cosine"}, "label", "val_auc", 0.01),
    ({"loss": "contrastive"}, "label", "val_auc", 0.01),
    ({"loss": "mnr", "score": None}, "positive", "val_recall_at_1", 0.05),
]


@pytest.mark.parametrize(("pairs", "target", "metric", "lr"), LEARNERS,
                         ids=[f"{p['loss']}-{t}" for p, t, _, _ in LEARNERS])
def test_each_pair_loss_learns_what_a_random_projection_misses(tmp_path, pairs, target, metric,
                                                               lr):
    from raycache._train.worker.assemble import build_kit
    from raycache._train.worker.epoch import SLOTS, evaluate, train_epoch
    from raycache._train.worker.heads import WorkerHeads

    torch.manual_seed(0)
    kit = build_kit(run_spec(tmp_path, pairs, lr=lr), torch.device("cpu"), 1200)
    train = pair_part(400, 1200, 1, target)
    val = pair_part(300, 600, 2, "positive" if target == "positive" else "label")

    def validate():
        slots = torch.zeros(SLOTS, dtype=torch.float64)
        return evaluate(WorkerHeads.of(kit), val, slots)[0].compute()

    before, losses = validate(), []
    for epoch in range(8):
        sums = torch.zeros(SLOTS, dtype=torch.float64)
        train_epoch(WorkerHeads.of(kit), train, seed=epoch, sums=sums)
        losses.append(float(sums[0] / sums[2]))
    after = validate()
    assert losses[-1] < losses[0], losses
    assert after[metric] > before[metric] + 0.2 and after[metric] > 0.7, (before, after)
    if target == "positive":
        assert after["val_acc"] == after["val_recall_at_1"] and after["val_mrr"] >= after["val_acc"]
    else:
        assert {"val_spearman", "val_pearson", "val_auc", "val_acc", "val_threshold"} <= set(after)
        assert after["val_spearman"] > before["val_spearman"] + 0.2


def test_pair_metrics_equal_torchmetrics_and_a_brute_force_threshold():
    from torchmetrics.functional import pearson_corrcoef, spearman_corrcoef
    from torchmetrics.functional.classification import binary_auroc

    from raycache._train.objectives.pair_metrics import best_accuracy, pearson, roc_auc, spearman

    g = torch.Generator().manual_seed(5)
    label = torch.randint(0, 2, (300,), generator=g)
    sims = (label + 1.5 * torch.randn(300, generator=g)).round(decimals=1)  # ties included
    score = (sims + torch.randn(300, generator=g)).round(decimals=1)
    assert spearman(sims, score) == pytest.approx(float(spearman_corrcoef(sims, score)),
                                                  abs=1e-5)
    assert pearson(sims, score) == pytest.approx(float(pearson_corrcoef(sims, score)), abs=1e-5)
    auc = roc_auc(sims, label)
    assert 0.6 < auc < 0.9 and auc == pytest.approx(float(binary_auroc(sims, label)), abs=1e-5)
    acc, threshold = best_accuracy(sims, label)
    cuts = torch.cat([sims.unique(), sims.max()[None] + 1])
    brute = max(float(((sims >= c) == label.bool()).double().mean()) for c in cuts)
    assert acc == pytest.approx(brute) and acc > 0.6
    assert float(((sims > threshold) == label.bool()).double().mean()) == pytest.approx(acc)


def test_symmetric_mnr_is_sentence_transformers_and_skips_copies_of_a_key(tmp_path):
    g = torch.Generator().manual_seed(0)
    out = torch.randn(6, 2, 16, generator=g)
    y = torch.tensor([[1.0, i, 10 + i] for i in range(6)], dtype=torch.float64)
    mnr = Pairs(run_spec(tmp_path, {"loss": "mnr", "scale": 20.0}), torch.device("cpu"))
    unit = torch.nn.functional.normalize(out, dim=-1)
    logits = 20.0 * unit[:, 0] @ unit[:, 1].T  # sentence-transformers: scale * cos_sim
    ce = torch.nn.functional.cross_entropy
    want = (ce(logits, torch.arange(6)) + ce(logits.T, torch.arange(6))) / 2
    assert float(mnr.loss(out, y)[1]) == pytest.approx(float(want), rel=1e-5)
    one_way = Pairs(run_spec(tmp_path, {"loss": "mnr", "symmetric": False}),
                    torch.device("cpu")).loss(out, y)[1]
    assert float(one_way) == pytest.approx(float(ce(logits, torch.arange(6))), rel=1e-5)
    # pair 5 repeats pair 0's right key (so its embedding): neither is the other's negative
    y[5, 2], out[5, 1] = y[0, 2], out[0, 1]
    unit = torch.nn.functional.normalize(out, dim=-1)
    logits = 20.0 * unit[:, 0] @ unit[:, 1].T
    logits[0, 5] = logits[5, 0] = -torch.inf
    one_way = Pairs(run_spec(tmp_path, {"loss": "mnr", "symmetric": False}),
                    torch.device("cpu")).loss(out, y)[1]
    assert float(one_way) == pytest.approx(float(ce(logits, torch.arange(6))), rel=1e-5)


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> tuple[str, str]:
    """A toy cache filled in-process (no Ray), and the folder for its pairs tables."""
    root = tmp_path_factory.mktemp("pairs")
    (root / "source").mkdir()
    pq.write_table(separable(n=300, classes=4), root / "source" / "a.parquet")
    raycache.fill(toy_fill(str(root / "source"), str(root / "store"), in_process=True))
    return str(root / "store"), str(root)


def label_pairs(n: int) -> pa.Table:
    """Pairs of the toy cache's rows labelled 1 when the two rows share a class."""
    table = separable(n=300, classes=4)
    ids, label = table.column("id").to_pylist(), table.column("label").to_numpy()
    rng = np.random.default_rng(0)
    left, right = rng.integers(0, 300, n), rng.integers(0, 300, n)
    return pa.table({"a": [ids[i] for i in left], "b": [ids[i] for i in right],
                     "same": (label[left] == label[right]).astype(np.int64)})


def test_pairs_train_through_raycache_train_on_a_filled_cache(filled):
    store, root = filled
    pq.write_table(label_pairs(900), f"{root}/pairs.parquet")
    run = raycache.train({
        "cache": "toy", "store": {"uri": store}, "objective": "pairs", "epochs": 3,
        "pairs": {"path": f"{root}/pairs.parquet", "left": "a", "right": "b", "score": "same",
                  "loss": "contrastive"},
        "embedding_dim": 8, "lr": 0.02, "batch_size": 64, "num_workers": 0, "progress": False,
        "monitor": "val_auc"})
    first, last = run.history[0], run.history[-1]
    assert run.spec.recipe.evaluation.mode == "max" and run.spec.head.label == ""
    assert last["train_loss"] < first["train_loss"] and last["val_auc"] > 0.9, last
    assert first["train_rows"] + first["val_rows"] == 900 and 100 < first["val_rows"] < 300
    head = run.load_head()
    assert head.spec.objective == "pairs" and head.spec.width == 8
    record = json.loads(Path(run.spec.run_dir, "run.json").read_text())
    assert record["recipe"]["pairs"]["loss"] == "contrastive"


def test_a_pair_key_missing_from_the_cache_is_named_before_training(filled):
    store, root = filled
    table = label_pairs(50)
    bad = table.column("a").to_pylist()
    bad[3], bad[7] = "nope-1", "nope-2"
    with open(f"{root}/bad.jsonl", "w") as f:
        for a, b, s in zip(bad, table.column("b").to_pylist(), table.column("same").to_pylist(),
                           strict=True):
            f.write(json.dumps({"left": a, "right": b, "score": s}) + "\n")
    with pytest.raises(ConfigError) as err:
        raycache.train({"cache": "toy", "store": {"uri": store}, "objective": "pairs",
                        "pairs": {"path": f"{root}/bad.jsonl"}, "num_workers": 0})
    text = str(err.value)
    assert "2 of its" in text and "'nope-1', 'nope-2'" in text and "key column 'id'" in text
    with pytest.raises(ConfigError, match="pairs.loss=contrastive needs 0/1 labels"):
        pq.write_table(pa.table({"left": ["row-00001"], "right": ["row-00002"],
                                 "score": [0.5]}), f"{root}/graded.parquet")
        raycache.train({"cache": "toy", "store": {"uri": store}, "objective": "pairs",
                        "pairs": {"path": f"{root}/graded.parquet", "loss": "contrastive"}})


def test_pair_settings_are_checked_with_the_fix_named():
    with pytest.raises(ConfigError) as err:
        load_train({"cache": "c", "objective": "pairs", "distance": "euclidean",
                           "pairs": {"loss": "mnr", "scale": 0, "margin": 0.5}})
    text = str(err.value)
    for part in ("pairs.path: missing", "pairs.loss mnr needs a similarity", "pairs.scale=0",
                 "pairs.margin applies to pairs.loss contrastive only"):
        assert part in text, text
    with pytest.raises(ConfigError, match="pairs.score is none"):
        load_train({"cache": "c", "objective": "pairs",
                           "pairs": {"path": "p.jsonl", "score": None, "loss": "cosine"}})

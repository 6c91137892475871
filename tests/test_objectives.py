"""Objectives: every group loss learns groups hidden in noise (the loss falls, retrieval beats the
untrained head's random projection), retrieval metrics match a brute-force computation, a loss
gathered across two real DDP workers (groups', and pairs' symmetric MNR) equals the one-process
loss of the same global batch, and the config checks name the bad value."""

import dataclasses
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from raycache import ConfigError
from raycache._cache.store import Store
from raycache._heads.specs import HeadSpec
from raycache._train.config import GroupsConfig
from raycache._train.driver.checks import load_config as load_train
from raycache._train.objectives.groups import Groups
from raycache._train.objectives.pairs import Pairs
from raycache._train.objectives.retrieval import retrieval_metrics
from raycache._train.runspec import Recipe, WorkerSpec

DIM, GROUPS, SIGNAL = 32, 8, 4


@pytest.fixture(autouse=True)
def one_thread():
    """Small tensors: one thread is faster, and leaves the other core alone."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def hidden_groups(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Groups told apart by SIGNAL dims only, drowned in 28 dims of wider noise: a random
    projection mixes the noise in, a trained head learns to keep the signal."""
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(GROUPS, SIGNAL, generator=torch.Generator().manual_seed(99)) * 2
    y = torch.randint(0, GROUPS, (n,), generator=g)
    x = torch.randn(n, DIM, generator=g) * 3
    x[:, :SIGNAL] = centers[y] + 0.3 * torch.randn(n, SIGNAL, generator=g)
    return x, y


class Holder:
    """In-memory (x, y) batches, reshuffled by seed (like in_memory.InMemory)."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.y)

    def batches(self, batch_size, seed, then=None):
        order = (torch.arange(len(self.y)) if seed is None else
                 torch.randperm(len(self.y), generator=torch.Generator().manual_seed(seed)))
        for i in range(0, len(order), batch_size):
            yield self.x[order[i:i + batch_size]], self.y[order[i:i + batch_size]]


def run_spec(tmp_path, head="linear", normalize=False, out_dim=16, **over) -> WorkerSpec:
    cfg = load_train({"cache": "c", "objective": "groups", "metrics_k": [1, 5],
                             "lr": 0.01, "batch_size": 64, **over})
    spec = HeadSpec(head=head, in_dim=DIM, num_classes=GROUPS, hidden=(32,), dropout=0.0,
                    encoders=("e",), label="label", cache="c", fingerprint="f" * 24,
                    objective=cfg.objective, out_dim=out_dim, normalize=normalize)
    return WorkerSpec.of(head=spec, recipe=Recipe.from_config(cfg), run_name="r", key="id",
                   rows=900, placement="cpu", num_workers=0, use_gpu=False, class_weights=None,
                   store=Store(str(tmp_path)), shards=(), run_dir=str(tmp_path / "run"),
                   checkpoint_every=0, checkpoint_seconds=0, prefetch_batches=1,
                   progress=False)


def fit(spec: WorkerSpec, epochs: int) -> tuple[list[float], dict, dict]:
    """(train loss per epoch, validation metrics before training, after training)."""
    from raycache._train.worker.assemble import build_kit
    from raycache._train.worker.epoch import SLOTS, evaluate, train_epoch
    from raycache._train.worker.heads import WorkerHeads

    torch.manual_seed(0)
    kit = build_kit(spec, torch.device("cpu"), 600)
    train, val = Holder(*hidden_groups(600, 1)), Holder(*hidden_groups(300, 2))

    def validate():
        slots = torch.zeros(SLOTS, dtype=torch.float64)
        return evaluate(WorkerHeads.of(kit), val, slots)[0].compute()

    before, losses = validate(), []
    for epoch in range(epochs):
        sums = torch.zeros(SLOTS, dtype=torch.float64)
        train_epoch(WorkerHeads.of(kit), train, seed=epoch, sums=sums)
        losses.append(float(sums[0] / sums[2]))
    return losses, before, validate()


LEARNERS = [
    ({"loss": "contrastive"}, {}),
    ({"loss": "contrastive", "miner": "hard"}, {}),
    ({"loss": "triplet", "margin": 0.2}, {}),
    ({"loss": "triplet", "margin": 0.2, "miner": "all"}, {}),
    ({"loss": "triplet", "margin": 0.2, "miner": "hard"}, {"distance": "euclidean"}),
    ({"loss": "triplet", "margin": 0.2, "miner": "semihard"}, {}),
    ({"loss": "triplet", "soft_margin": True}, {"distance": "manhattan"}),
    ({"loss": "infonce"}, {}),
    ({"loss": "mnr", "scale": 10}, {"distance": "dot", "normalize": True}),
    ({"loss": "arcface"}, {"lr": 0.02}),
    ({"loss": "cosface"}, {"lr": 0.02}),
    ({"loss": "softmax"}, {"lr": 0.05}),
]


@pytest.mark.parametrize(("groups", "over"), LEARNERS,
                         ids=["-".join(map(str, g.values())) + "-" + over.get("distance", "cos")
                              for g, over in LEARNERS])
def test_each_group_loss_learns_groups_a_random_projection_misses(tmp_path, groups, over):
    over = dict(over)
    normalize = over.pop("normalize", False)
    losses, before, after = fit(run_spec(tmp_path, normalize=normalize, groups=groups, **over),
                                epochs=4)
    assert losses[-1] < losses[0], losses
    assert before["val_map_at_5"] < 0.3, before  # the untrained head: a random projection
    assert after["val_map_at_5"] > before["val_map_at_5"] + 0.4, (before, after)
    assert after["val_acc"] == after["val_precision_at_1"] > 0.75, after
    assert set(after) >= {"val_mrr", "val_r_precision", "val_recall_at_5", "val_precision_at_5"}


@pytest.mark.parametrize("head", ["linear", "mlp", "stacked", "widening", "gated", "skip"])
def test_every_head_family_trains_a_similarity_head(tmp_path, head):
    losses, before, after = fit(run_spec(tmp_path, head=head, normalize=True,
                                         groups={"loss": "infonce"}), epochs=4)
    assert losses[-1] < losses[0] and after["val_map_at_5"] > before["val_map_at_5"] + 0.4


def brute_force(emb: np.ndarray, groups: np.ndarray, ks: list[int]) -> dict[str, float]:
    """The textbook definitions, one query at a time (cosine similarity, the query excluded)."""
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    sims = unit @ unit.T
    out: dict[str, list[float]] = {}
    for q in range(len(emb)):
        others = [j for j in range(len(emb)) if j != q]
        ranked = sorted(others, key=lambda j: -sims[q, j])
        rel = [groups[j] == groups[q] for j in ranked]
        big_r = sum(rel)
        if big_r == 0:
            continue
        out.setdefault("mrr", []).append(1 / (rel.index(True) + 1))
        out.setdefault("r_precision", []).append(sum(rel[:big_r]) / big_r)
        for k in ks:
            out.setdefault(f"precision_at_{k}", []).append(sum(rel[:k]) / k)
            out.setdefault(f"recall_at_{k}", []).append(sum(rel[:k]) / big_r)
            ap = sum(sum(rel[:i + 1]) / (i + 1) for i in range(min(k, len(rel))) if rel[i])
            out.setdefault(f"map_at_{k}", []).append(ap / min(k, big_r))
    return {name: float(np.mean(v)) for name, v in out.items()}


def test_retrieval_metrics_match_a_brute_force_computation_and_torchmetrics():
    from torchmetrics.functional import retrieval as tm

    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(12), rng.integers(1, 9, 12))  # sizes 1..8: some singletons
    centers = rng.normal(size=(12, 6))
    emb = (centers[groups] + rng.normal(scale=1.2, size=(len(groups), 6))).astype(np.float32)
    ks = [1, 3, 10]
    got = retrieval_metrics(torch.from_numpy(emb), torch.from_numpy(groups), "cosine",
                            tuple(ks))
    want = brute_force(emb, groups, ks)
    assert got == pytest.approx(want, abs=1e-6)
    assert 0.2 < got["map_at_3"] < 0.95  # neither trivial nor hopeless: a real check
    # precision, recall, MRR and R-precision as torchmetrics defines them (scores made
    # positive by a rank-preserving exp, since torchmetrics drops candidates scored <= 0)
    unit = torch.nn.functional.normalize(torch.from_numpy(emb), dim=1)
    per_query: dict[str, list[float]] = {}
    for q in range(len(groups)):
        keep = torch.arange(len(groups)) != q
        preds = (unit[q] @ unit[keep].T).exp()
        target = torch.from_numpy(groups[keep.numpy()] == groups[q])
        if not target.any():
            continue
        per_query.setdefault("mrr", []).append(tm.retrieval_reciprocal_rank(preds, target))
        per_query.setdefault("r_precision", []).append(tm.retrieval_r_precision(preds, target))
        for k in ks:
            per_query.setdefault(f"precision_at_{k}", []).append(
                tm.retrieval_precision(preds, target, top_k=k))
            per_query.setdefault(f"recall_at_{k}", []).append(
                tm.retrieval_recall(preds, target, top_k=k))
    for name, values in per_query.items():
        assert got[name] == pytest.approx(float(torch.stack(values).mean()), abs=1e-6), name


def test_classification_reports_macro_f1_and_top_k_accuracy(tmp_path):
    from raycache._train.worker.assemble import build_kit
    from raycache._train.worker.epoch import SLOTS, evaluate, train_epoch
    from raycache._train.worker.heads import WorkerHeads

    spec = run_spec(tmp_path, objective="classification", out_dim=GROUPS, lr=0.05)
    spec = spec.replace(head=dataclasses.replace(spec.head,
                                                              objective="classification"))
    torch.manual_seed(0)
    kit = build_kit(spec, torch.device("cpu"), 600)
    for epoch in range(5):
        train_epoch(WorkerHeads.of(kit), Holder(*hidden_groups(600, 1)), epoch,
                    torch.zeros(SLOTS, dtype=torch.float64))
    sums = torch.zeros(SLOTS, dtype=torch.float64)
    found = evaluate(WorkerHeads.of(kit), Holder(*hidden_groups(300, 2)), sums)[0].compute()
    acc = float(sums[4] / sums[5])
    assert set(found) == {"val_f1", "val_top5_acc"}
    assert 0.5 < found["val_f1"] <= 1 and found["val_top5_acc"] >= acc > 0.5


def test_classification_metrics_equal_torchmetrics():
    from torchmetrics.functional.classification import multiclass_accuracy, multiclass_f1_score

    from raycache._train.objectives.classification import ClassMetrics

    g = torch.Generator().manual_seed(3)
    for classes in (2, 5, 9):
        metrics = ClassMetrics(classes, (1, 3, 5), torch.device("cpu"))
        outs, ys = [], []
        for n in (7, 40, 13):  # several batches, like an evaluation pass
            out, y = torch.randn(n, classes, generator=g), torch.randint(0, classes, (n,),
                                                                         generator=g)
            y[: n // 2] = out[: n // 2].argmax(-1)  # better than chance
            metrics.update(out, y)
            outs.append(out)
            ys.append(y)
        found, out, y = metrics.compute(), torch.cat(outs), torch.cat(ys)
        f1 = multiclass_f1_score(out, y, num_classes=classes, average="macro")
        assert found["val_f1"] == pytest.approx(float(f1), abs=1e-6)
        for k in (3, 5):
            if k < classes:
                acc = multiclass_accuracy(out, y, num_classes=classes, top_k=k, average="micro")
                assert found[f"val_top{k}_acc"] == pytest.approx(float(acc), abs=1e-6)


def test_class_metrics_of_many_heads_at_once_equal_each_heads_own():
    from raycache._train.objectives.classification import ClassMetrics

    g = torch.Generator().manual_seed(4)
    joint = ClassMetrics(5, (1, 3), torch.device("cpu"), members=3)
    alone = [ClassMetrics(5, (1, 3), torch.device("cpu")) for _ in range(3)]
    for n in (9, 30):
        out, y = torch.randn(n, 3, 5, generator=g), torch.randint(0, 5, (n,), generator=g)
        out[: n // 2, 1] += 10 * torch.nn.functional.one_hot(y[: n // 2], 5)  # head 1 better
        joint.update(out, y)
        for i, metrics in enumerate(alone):
            metrics.update(out[:, i], y)
    found, want = joint.compute_each(), [m.compute() for m in alone]
    assert found == [pytest.approx(w, abs=1e-12) for w in want]
    assert found[1]["val_f1"] > found[0]["val_f1"]


GATHERED = [{"loss": "infonce"}, {"loss": "contrastive"},
            {"loss": "triplet", "miner": "hard", "margin": 0.3}]


def fixed_head() -> torch.nn.Linear:
    head = torch.nn.Linear(DIM, 6)
    with torch.no_grad():
        head.weight.copy_(torch.linspace(-1, 1, 6 * DIM).reshape(6, DIM))
        head.bias.zero_()
    return head


def global_batch() -> tuple[torch.Tensor, torch.Tensor]:
    x, _ = hidden_groups(8, 3)
    return x, torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])


def groups_spec(loss: dict) -> WorkerSpec:
    return run_spec(Path(tempfile.gettempdir()), out_dim=6, groups=loss)


def pairs_batch() -> tuple[torch.Tensor, torch.Tensor, Pairs]:
    """8 positive pairs (score, left key id, right key id), pair 6 repeating pair 1's right
    key (across the two workers' parts), and the symmetric MNR objective."""
    x = hidden_groups(16, 4)[0].reshape(8, 2, DIM)
    x[6, 1] = x[1, 1]
    y = torch.tensor([[1.0, i, 100 + i] for i in range(8)], dtype=torch.float64)
    y[6, 2] = y[1, 2]
    spec = run_spec(Path(tempfile.gettempdir()), out_dim=6, objective="pairs",
                    pairs={"path": "unused.parquet", "loss": "mnr"})
    return x, y, Pairs(spec, torch.device("cpu"))


def _worker(rank: int, init: str, out: str) -> None:
    """One of two gloo workers: its part of the global batch (5 rows or 3), under DDP."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    try:
        from raycache._train.objectives.gather import lockstep

        x, y = global_batch()
        mine = slice(0, 5) if rank == 0 else slice(5, 8)  # uneven, like an epoch's last batch
        found = []
        for loss in GATHERED:
            head = fixed_head()
            model = torch.nn.parallel.DistributedDataParallel(head)
            backprop, value = Groups(groups_spec(loss), torch.device("cpu")).loss(
                model(x[mine]), y[mine])
            backprop.backward()
            found.append({"loss": value, "grad": head.weight.grad})
        x, y, pairs = pairs_batch()
        head = fixed_head()
        model = torch.nn.parallel.DistributedDataParallel(head)  # kept alive for backward
        backprop, value = pairs.loss(model(x[mine]), y[mine])
        backprop.backward()
        found.append({"loss": value, "grad": head.weight.grad})
        steps = list(lockstep(iter([0] * (2 + rank)), torch.device("cpu")))
        torch.save({"found": found, "steps": len(steps)}, f"{out}/{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(120)
def test_loss_gathered_across_two_workers_equals_the_one_process_loss(tmp_path):
    init = f"file://{tmp_path / 'rendezvous'}"
    mp.spawn(_worker, args=(init, str(tmp_path)), nprocs=2, join=True)
    x, y = global_batch()
    ranks = [torch.load(tmp_path / f"{r}.pt") for r in (0, 1)]
    for i, loss in enumerate(GATHERED):
        head = fixed_head()
        backprop, value = Groups(groups_spec(loss), torch.device("cpu")).loss(head(x), y)
        backprop.backward()
        assert float(value) > 0, loss
        for got in ranks:
            assert float(got["found"][i]["loss"]) == pytest.approx(float(value), rel=1e-5)
            # DDP averaged the two workers' gradients, each scaled by the world size: the
            # average is the gradient of the global batch's loss
            torch.testing.assert_close(got["found"][i]["grad"], head.weight.grad,
                                       rtol=1e-4, atol=1e-6)
    x, y, pairs = pairs_batch()  # symmetric MNR over the pairs of both workers
    head = fixed_head()
    backprop, value = pairs.loss(head(x), y)
    backprop.backward()
    assert float(value) > 0
    for got in ranks:
        assert float(got["found"][-1]["loss"]) == pytest.approx(float(value), rel=1e-5)
        torch.testing.assert_close(got["found"][-1]["grad"], head.weight.grad, rtol=1e-4,
                                   atol=1e-6)
    assert [got["steps"] for got in ranks] == [2, 2]  # lockstep: both stop with the shorter


def test_group_settings_are_checked_with_the_fix_named():
    with pytest.raises(ConfigError) as err:
        load_train({"cache": "c", "objective": "groups", "distance": "hamming",
                           "metrics_k": [0], "groups": {"loss": "infonce", "miner": "hard",
                                                       "scale": -1}})
    text = str(err.value)
    for part in ("distance='hamming'", "metrics_k=[0]", "groups.miner='hard': infonce takes "
                 "one of ('none',)", "groups.scale=-1"):
        assert part in text, text
    with pytest.raises(ConfigError, match="groups.loss='npair': unknown"):
        load_train({"cache": "c", "objective": "groups", "groups": {"loss": "npair"}})
    with pytest.raises(ConfigError, match="needs a similarity"):
        load_train({"cache": "c", "objective": "groups", "distance": "euclidean",
                           "groups": {"loss": "mnr"}})
    with pytest.raises(ConfigError, match="objective='ranking': unknown"):
        load_train({"cache": "c", "objective": "ranking"})
    assert load_train({"cache": "c", "objective": "groups"}).groups == GroupsConfig()


def test_recipe_carries_the_objective_into_the_digest_and_picks_the_monitor_mode():
    base = {"cache": "c", "objective": "groups"}
    a = Recipe.from_config(load_train(base))
    b = Recipe.from_config(load_train({**base, "groups": {"loss": "arcface"}}))
    assert a != b and dataclasses.asdict(a) != dataclasses.asdict(b)
    assert Recipe.from_config(load_train({**base, "monitor": "val_map_at_10"})).evaluation.mode \
        == "max"
    assert Recipe.from_config(load_train(base)).evaluation.mode == "min"  # val_loss
    assert os.sep not in str(a.groups)


def test_the_metrics_a_monitor_may_name_are_those_the_evaluators_report():
    """What the config check accepts (Family.metrics) is what each evaluator reports."""
    from raycache._train.config import PairsConfig
    from raycache._train.objectives import OBJECTIVES
    from raycache._train.objectives.classification import ClassMetrics
    from raycache._train.objectives.groups import Retrieval
    from raycache._train.objectives.pairs import PairMetrics

    torch.manual_seed(0)
    cls = ClassMetrics(12, (1, 5, 10), torch.device("cpu"))
    cls.update(torch.randn(40, 12), torch.randint(0, 12, (40,)))
    ret = Retrieval("cosine", (1, 5, 10), 4)
    ret.update(torch.randn(40, 4), torch.randint(0, 5, (40,)))
    mnr = PairMetrics("cosine", PairsConfig(path="p", loss="mnr"), 4)
    mnr.update(torch.randn(20, 2, 4), torch.stack([torch.randint(0, 2, (20,)).double(),
                                                  torch.arange(20.0), torch.arange(20.0) + 20],
                                                 1))
    for objective, evaluator, over in (("classification", cls, {}), ("groups", ret, {}),
                                       ("pairs", mnr, {"pairs": {"path": "p", "loss": "mnr"}})):
        cfg = load_train({"cache": "c", "objective": objective, **over})
        known = set(OBJECTIVES[objective].metrics(cfg)) | {"val_acc"}
        assert set(evaluator.compute()) <= known, (objective, set(evaluator.compute()) - known)

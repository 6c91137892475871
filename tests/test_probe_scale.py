"""A probe in this process or on Ray: where it runs, decided from the features' size (pinned on
described sizes); on Ray workers that each hold a share of the rows, the same table as in
this process (knn's very predictions, logreg's weights to float rounding, the same per-class
metrics), those metrics from the workers' confusion counts summed, never their predictions."""

import dataclasses
from types import SimpleNamespace

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from sklearn.metrics import precision_recall_fscore_support

import raycache
from raycache import ConfigError
from raycache._compute.where import Cluster
from raycache._compute.workers import Room, decide
from raycache._probe.config import ProbeConfig
from raycache._probe.data import Candidate
from raycache._probe.knn import merge, neighbours, predict
from raycache._probe.metrics import confusion, per_class
from raycache._probe.run import score
from raycache._probe.workers import target_bytes
from tests.conftest import separable, toy_fill

GIB = 2**30


def test_the_decision_is_pinned_on_described_sizes():
    here = Room(16 * GIB)
    five = Room(16 * GIB, Cluster(({"CPU": 2.0},) * 5, "head:6379"))
    assert decide("auto", 1 * GIB, here)[0] == 0  # 1 GiB <= a quarter of 16
    assert decide("auto", 4 * GIB, here)[0] == 0  # exactly a quarter still fits
    workers, why = decide("auto", 5 * GIB, here)
    assert workers == 2 and "5.00 GiB of features do not fit" in why and "16.0 GiB" in why
    assert decide("auto", 10 * GIB, here)[0] == 3  # shares of at most 4 GiB each
    assert decide("auto", 10 * GIB, five)[0] == 5  # one per node at least
    assert decide("auto", 1 * GIB, five)[0] == 0  # fits: no Ray, however many
    assert decide(0, 100 * GIB, Room(GIB)) == (0, "num_workers: 0")  # forced either way
    assert decide(3, 1, here) == (3, "num_workers: 3")
    assert "fit in this process" in decide("auto", GIB, here)[1]
    target = SimpleNamespace(cache=SimpleNamespace(manifest=SimpleNamespace(rows=1000)),
                             spec=SimpleNamespace(in_dim=384))
    assert target_bytes([target, target]) == 2 * 1000 * (384 * 4 + 8)


def test_training_and_the_probe_share_one_decision_and_differ_only_in_streaming():
    """The same features and room: both stay here while they fit; beyond, training streams
    them on one node and spreads over the nodes of a cluster, the probe splits them."""
    five = Room(16 * GIB, Cluster(({"CPU": 2.0},) * 5, "head:6379"))
    one = Room(16 * GIB, Cluster(({"CPU": 2.0},), "head:6379"))
    assert decide("auto", GIB, one, streams=True)[0] == decide("auto", GIB, one)[0] == 0
    assert decide("auto", 10 * GIB, one, streams=True) == (
        0, "one node with 2 CPUs; 10.00 GiB of features are streamed: they do not fit in memory")
    assert decide("auto", 10 * GIB, one)[0] == 3
    assert decide("auto", GIB, five, streams=True)[0] == 5  # DDP is faster over nodes
    assert decide(4, GIB, one, key="resources.num_workers", streams=True) == (
        4, "resources.num_workers: 4")


@pytest.mark.parametrize(("value", "words"), [
    (-1, "num_workers=-1: expected 'auto', 0"), ("two", "num_workers='two'"),
    (True, "num_workers=True")])
@pytest.mark.parametrize("make", [lambda **kw: ProbeConfig(caches=["docs"], **kw),
                                  lambda **kw: raycache.ResourcesConfig(**kw)],
                         ids=["probe", "training"])
def test_a_bad_worker_count_is_named_with_the_fix(make, value, words):
    problems = make(num_workers=value).problems()
    assert any(words in p for p in problems), problems
    assert any("cpus_per_worker=0" in p for p in make(cpus_per_worker=0).problems())


def test_training_and_the_probe_spell_their_workers_the_same_way():
    """num_workers and cpus_per_worker: the same names, types and defaults in both configs."""
    def fields(cls):
        return {f.name: (str(f.type), f.default) for f in dataclasses.fields(cls)
                if f.name in ("num_workers", "cpus_per_worker")}

    assert fields(ProbeConfig) == fields(raycache.ResourcesConfig)
    assert len(fields(ProbeConfig)) == 2


def test_more_workers_than_the_cluster_holds_are_refused_before_any_start():
    from raycache._probe.on_ray import check

    check(4, 0.5, [{"CPU": 2.0}], training=False)
    check(2, 0.5, [{"CPU": 2.0}], training=True)  # 2 probe + 2 DDP workers of 0.5
    with pytest.raises(ConfigError, match=r"num_workers=8: 8 probe workers .* hold 4 such "
                                          r"workers. Lower num_workers"):
        check(8, 1.0, [{"CPU": 2.0}, {"CPU": 2.0}], training=False)
    with pytest.raises(ConfigError, match="and 3 DDP workers"):
        check(3, 0.5, [{"CPU": 2.0}], training=True)


def test_every_method_has_its_ray_form_and_heads_train_on_as_many_ddp_workers():
    from raycache._probe import METHODS
    from raycache._probe.heads import train_config
    from raycache._probe.on_ray import ON_RAY

    assert set(ON_RAY) == set(METHODS)
    cfg = ProbeConfig(caches=["docs"], cpus_per_worker=0.25)
    assert train_config(cfg, "docs", None, "e", "linear", 3)["resources"] == {
        "num_workers": 3, "cpus_per_worker": 0.25}
    assert train_config(cfg, "docs", None, "e", "linear")["resources"] == {"num_workers": 0}


def test_per_class_metrics_come_from_summed_confusion_counts():
    rng = np.random.default_rng(0)
    y, pred = rng.integers(0, 4, 300), rng.integers(0, 4, 300)
    pred[y == 3] = 0  # class 3 never predicted: precision 0, recall 0
    shares = np.split(np.arange(300), [70, 200])  # three uneven shares
    summed = sum(confusion(y[s], pred[s], 4) for s in shares)
    assert np.array_equal(summed, confusion(y, pred, 4))
    names = ["a", "b", "c", "d"]
    p, r, f, s = precision_recall_fscore_support(y, pred, labels=[0, 1, 2, 3],
                                                 zero_division=0)
    got = per_class(summed, names)
    assert [got[n]["support"] for n in names] == list(s)
    assert np.allclose([got[n]["f1"] for n in names], f)
    assert np.allclose([got[n]["precision"] for n in names], p)
    # a candidate that carries only the counts scores as one that carries the predictions
    spec = SimpleNamespace(num_classes=4)
    here = SimpleNamespace(encoder="e", spec=spec, classes=names, y_val=y, train_rows=9,
                           val_rows=300)
    shared = SimpleNamespace(encoder="e", spec=spec, classes=names, train_rows=9, val_rows=300)
    a = score(here, "knn", [Candidate({"k": 1}, pred)], "macro_f1", 0.0)
    b = score(shared, "knn", [Candidate({"k": 1}, None, confusion=summed)], "macro_f1", 0.0)
    assert a.scores == b.scores and a.per_class() == b.per_class()
    assert np.array_equal(a.confusion, b.confusion)


def test_the_shares_data_terms_and_one_penalty_are_the_whole_objective():
    """What logreg on Ray minimises: each worker's data term over its rows (divided by every
    share's rows together), summed, and one L2 penalty; and with class weights, the gradient
    of the objective is still its autograd gradient."""
    from raycache._fit.logreg import data_term, objective, penalty

    gen = torch.Generator().manual_seed(3)
    x, y = torch.randn(90, 5, generator=gen, dtype=torch.float64), torch.arange(90) % 3
    cs = [0.1, 10.0]
    p = torch.randn(2, 5 * 3 + 3, generator=gen, dtype=torch.float64)
    whole = objective(x, y, 3, cs)(p)
    parts = [data_term(x[lo:hi], y[lo:hi], 3, 2, 90)(p) for lo, hi in ((0, 20), (20, 90))]
    more = penalty(p, 5, 3, cs, 90)
    assert torch.allclose(parts[0][0] + parts[1][0] + more[0], whole[0], atol=1e-12)
    assert torch.allclose(parts[0][1] + parts[1][1] + more[1], whole[1], atol=1e-12)
    weighted = objective(x, y, 3, cs, weights=[1.0, 2.0, 0.5])
    q = p.clone().requires_grad_(True)
    weighted(q)[0].sum().backward()
    assert torch.allclose(weighted(p)[1], q.grad, atol=1e-10)


def test_merged_top_k_of_shares_is_the_global_top_k():
    """Similarities from other block shapes differ in the last bits (MKL picks other kernels
    on other shapes and processors), so they are compared with a tolerance; the rows chosen
    are exact, but for neighbours tied to within that tolerance, whose order may swap."""
    gen = torch.Generator().manual_seed(0)
    bank = torch.nn.functional.normalize(torch.randn(500, 12, generator=gen), dim=1)
    queries = torch.nn.functional.normalize(torch.randn(40, 12, generator=gen), dim=1)
    labels = torch.randint(0, 5, (500,), generator=gen)
    sims, ids = neighbours(queries, bank, 20, block_rows=64)
    with_labels, with_ids = [], []
    for lo, hi in ((0, 130), (130, 131), (131, 500)):  # a share of one row too
        s, i = neighbours(queries, bank[lo:hi], 20, block_rows=64)
        with_labels.append((s, labels[lo:hi][i]))
        with_ids.append((s, i + lo))
    got_s, got_labels = merge(with_labels, 20)
    _, got_ids = merge(with_ids, 20)
    assert torch.allclose(got_s, sims, atol=1e-6)
    assert torch.equal(got_labels, labels[got_ids])  # each label travels with its row
    exact = queries.double() @ bank.double().T
    swapped = got_ids != ids
    gap = (exact.gather(1, got_ids) - exact.gather(1, ids)).abs()
    assert bool((gap[swapped] < 1e-5).all()), "a merged neighbour that is no tie of the global one"
    want = predict(sims, labels[ids], [5, 20], 5, 0.07)
    got = predict(got_s, got_labels, [5, 20], 5, 0.07)
    assert all(np.array_equal(got[k], want[k]) for k in (5, 20))


def test_a_bank_of_several_blocks_smaller_than_k_comes_back_best_first():
    gen = torch.Generator().manual_seed(1)
    bank, queries = torch.randn(15, 4, generator=gen), torch.randn(6, 4, generator=gen)
    sims, ids = neighbours(queries, bank, 20, block_rows=8)  # two blocks, 15 rows < k
    want = (queries @ bank.T).sort(dim=1, descending=True)  # (one product: rounding apart)
    assert torch.equal(ids, want.indices) and torch.allclose(sims, want.values, atol=1e-6)


def encoder(name: str, out_dim: int, seed: int) -> dict:
    return {"name": name, "kind": "torch", "input": "features",
            "factory": "toy_encoders:projection",
            "kwargs": {"in_dim": 8, "out_dim": out_dim, "seed": seed}}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A cache of 4 shards (200 rows each but the last), two encoders; noisy enough that the
    methods make mistakes, so their equality says something."""
    root = tmp_path_factory.mktemp("scale")
    (root / "source").mkdir()
    table = separable(n=700, classes=4, seed=5)
    noise = np.random.default_rng(5).normal(0, 2.0, (700, 8)).astype(np.float32)
    feats = table.column("features").combine_chunks()
    x = feats.flatten().to_numpy().reshape(700, 8) + noise
    import pyarrow as pa

    table = table.set_column(table.schema.get_field_index("features"), "features",
                             pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), 8))
    pq.write_table(table, root / "source" / "a.parquet")
    uri = str(root / "store")
    raycache.fill(toy_fill(str(root / "source"), uri, in_process=True,
                           encoders=[encoder("proj", 16, 0), encoder("wide", 24, 3)]))
    return uri


def config(store: str, **over) -> dict:
    cfg = {"caches": ["toy"], "store": {"uri": store}, "label": "name",
           "methods": ["logreg", "knn", "linear"], "progress": False, "report": False,
           "logreg": {"C": [0.01, 0.1, 1.0, 10.0]}, "knn": {"k": [1, 5, 10], "block_rows": 64},
           "linear": {"sweep": {"optim.lr": [0.01, 0.05]}, "train": {"loop": {"epochs": 2}}}}
    return cfg | over


@pytest.mark.ray
@pytest.mark.timeout(240)
def test_on_ray_the_table_equals_the_one_in_this_process(ray_session, store, capsys):
    here = raycache.probe(config(store, num_workers=0))  # linear's run trains here
    there = raycache.probe(config(store, num_workers=3), progress=True)
    assert "probe on Ray, 3 workers: num_workers: 3" in capsys.readouterr().out
    assert there.where == "on Ray, 3 workers: num_workers: 3"
    assert "(on Ray, 3 workers)" in there.summary()
    assert here.where.startswith("in this process: num_workers: 0")
    assert len(here.outcomes) == len(there.outcomes) == 6
    for a, b in zip(here.outcomes, there.outcomes, strict=True):
        assert (a.encoder, a.method) == (b.encoder, b.method)
        assert (a.train_rows, a.val_rows) == (b.train_rows, b.val_rows)
        assert np.array_equal(a.confusion, b.confusion), (a.encoder, a.method)
        assert a.scores == b.scores and a.per_class() == b.per_class()
        drop = {"iterations"}  # float rounding of the summed gradient may stop a step apart
        assert [{k: v for k, v in g.items() if k not in drop} for g in a.grid] == \
            [{k: v for k, v in g.items() if k not in drop} for g in b.grid]
        if a.method == "logreg":  # float32 L-BFGS stops where rounding stops its steps: the
            # two sums (one product, or three shares' added) agree to ~0.1% of the weights
            for name, w in a.head_weights.items():
                gap = (w - b.head_weights[name]).abs().max()
                assert gap <= 5e-3 * w.abs().max(), (a.encoder, name, float(gap))
    plain = ["seconds", "setting"]
    assert here.table.drop(columns=plain).equals(there.table.drop(columns=plain))
    assert [{k: v for k, v in s.items() if k != "iterations"} for s in here.table.setting] == \
        [{k: v for k, v in s.items() if k != "iterations"} for s in there.table.setting]


@pytest.mark.ray
@pytest.mark.timeout(180)
def test_the_workers_predictions_are_the_ones_made_in_this_process(ray_session, store):
    """knn's very predictions (each worker's share of the validation rows, in rank order, is
    the in-process order), and logreg's."""
    import ray

    from raycache._cache.store import Store
    from raycache._pipeline import TRAINING
    from raycache._probe import METHODS
    from raycache._probe.load import read
    from raycache._probe.on_ray import ON_RAY, Workers
    from raycache._probe.plan import load_config, targets

    cfg = load_config(config(store, methods=["logreg", "knn"]), TRAINING)
    found = targets(cfg, Store.from_config(cfg.store), TRAINING)
    features = {f.encoder: f for f in read(found, cfg.val_fraction)}
    group = Workers(2, 0.5, progress=False)
    try:
        for shared in group.load(cfg, found):
            data = features[shared.encoder]
            assert (shared.train_rows, shared.val_rows) == (data.train_rows, data.val_rows)
            for method, key in (("knn", "knn"), ("logreg", "logreg")):
                want = [c.pred for c in METHODS[method](data, cfg, "cpu", TRAINING)]
                ON_RAY[method](shared, cfg, TRAINING)
                parts = ray.get([a.predictions.remote(shared.column, key)
                                 for a in group.actors])
                got = [np.concatenate([p[i] for p in parts]) for i in range(len(want))]
                for g, w in zip(got, want, strict=True):
                    assert np.array_equal(g, w), (shared.encoder, method, int((g != w).sum()))
    finally:
        group.close()


@pytest.mark.ray
@pytest.mark.timeout(120)
def test_a_damaged_shard_a_worker_reads_is_named_as_itself(ray_session, tmp_path):
    (tmp_path / "source").mkdir()
    pq.write_table(separable(n=400, seed=7), tmp_path / "source" / "a.parquet")
    uri = str(tmp_path / "store")
    raycache.fill(toy_fill(str(tmp_path / "source"), uri, in_process=True, name="hurt"))
    shard = sorted((tmp_path / "store").rglob("*.parquet"))[-1]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # the same size, another sha256
    shard.write_bytes(bytes(data))
    with pytest.raises(raycache.CorruptShard, match=shard.name):
        raycache.probe(config(uri, caches=["hurt"], methods=["knn"], num_workers=2))

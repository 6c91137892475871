"""raycache.probe on committed caches: one row per (encoder, method), training's key split,
per-class metrics by class name, the report under <cache>/probes/<name>/ and the best head
that load_head opens; bad input named before any work. In-process: no Ray."""

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from sklearn.metrics import precision_recall_fscore_support

import raycache
from raycache import ConfigError
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(300)

NAMES = ["class-0", "class-1", "class-2"]


def encoder(name: str, out_dim: int, seed: int) -> dict:
    return {"name": name, "kind": "torch", "input": "features",
            "factory": "toy_encoders:projection",
            "kwargs": {"in_dim": 8, "out_dim": out_dim, "seed": seed}}


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """Two caches of the same rows: `toy` with two encoders (16-d and a weak 1-d one) and
    `toy2` with a third; labels by id and by name. Features are noisy so methods differ."""
    root = tmp_path_factory.mktemp("probe")
    (root / "source").mkdir()
    table = separable(n=500, seed=2)
    pq.write_table(table, root / "source" / "a.parquet")
    store = str(root / "store")
    raycache.fill(toy_fill(str(root / "source"), store, in_process=True,
                           encoders=[encoder("proj", 16, 0), encoder("thin", 1, 1)]))
    raycache.fill(toy_fill(str(root / "source"), store, in_process=True, name="toy2",
                           encoders=[encoder("wide", 32, 2)]))
    return {"root": root, "store": store, "table": table}


def config(stores, **over) -> dict:
    cfg = {"caches": ["toy"], "store": {"uri": stores["store"]}, "label": "name",
           "methods": ["logreg", "knn"], "progress": False,
           "logreg": {"C": [0.01, 0.1, 1.0, 10.0]}, "knn": {"k": [5, 10], "block_rows": 64}}
    cfg.update(over)
    return cfg


@pytest.fixture(scope="module")
def probed(stores):
    return raycache.probe(config(stores, caches=["toy", "toy2"],
                                 methods=["logreg", "knn", "linear"],
                                 linear={"sweep": {"optim.lr": [0.01, 0.05]},
                                         "train": {"loop": {"epochs": 3}}}))


def test_the_table_has_a_row_per_encoder_and_method_best_first(probed):
    t = probed.table
    assert list(t.columns[:6]) == ["encoder", "method", "setting", "val_acc", "macro_f1",
                                   "balanced_acc"]
    assert sorted(zip(t.encoder, t.method, strict=True)) == sorted(
        (e, m) for e in ("toy/proj", "toy/thin", "toy2/wide") for m in ("logreg", "knn",
                                                                         "linear"))
    assert list(t.val_acc) == sorted(t.val_acc, reverse=True)
    assert probed.best == t.iloc[0].to_dict() | {"setting": probed.best["setting"]}
    assert probed.best["val_acc"] == t.val_acc.max()
    logreg = t[(t.method == "logreg") & (t.encoder == "toy/proj")].iloc[0]
    assert logreg.setting["C"] in (0.01, 0.1, 1.0, 10.0)
    knn = t[t.method == "knn"].iloc[0]
    assert knn.setting["k"] in (5, 10) and knn.setting["metric"] == "cosine"
    # a 1-d projection of 3 classes is a weaker encoder: the probe tells them apart
    thin = t[t.encoder == "toy/thin"].val_acc.max()
    assert thin < t[t.encoder == "toy/proj"].val_acc.max()


def test_every_encoder_uses_the_split_training_uses(probed, stores):
    run = raycache.train({"cache": "toy", "store": {"uri": stores["store"]}, "label": "name",
                          "num_workers": 0, "progress": False, "epochs": 1})
    held = run.held_out(stores["table"].column("id")).sum()
    t = probed.table
    assert set(t.val_rows) == {held} and set(t.train_rows) == {500 - held}


def test_per_class_metrics_are_by_class_name_and_match_the_saved_head(probed, stores):
    per = probed.per_class
    assert list(per.index) == NAMES
    assert list(per.columns) == ["precision", "recall", "f1", "support"]
    assert per.support.sum() == probed.best["val_rows"]
    head = probed.load_head()
    assert head.classes == NAMES
    # the saved head is the best row's, or where that is knn the best head's
    saved = head.info["probe"]
    if probed.best["method"] != "knn":
        assert (saved["encoder"], saved["method"]) == (probed.best["encoder"],
                                                       probed.best["method"])
    cache_name, _, column = saved["encoder"].rpartition("/")
    rows = raycache.open_cache(cache_name, stores["store"]).read_table(["id", "name", column])
    run = raycache.train({"cache": cache_name, "store": {"uri": stores["store"]},
                          "label": "name", "num_workers": 0, "progress": False, "epochs": 1})
    held = run.held_out(rows.column("id"))
    x = np.stack(rows.column(column).to_numpy(zero_copy_only=False))[held]
    truth = np.asarray(rows.column("name").to_pylist())[held]
    predicted = head.predict_embeddings(x)
    p, r, f, s = precision_recall_fscore_support(truth, predicted, labels=NAMES,
                                                 zero_division=0)
    mine = probed.per_class_of(saved["encoder"], saved["method"])
    assert np.allclose(mine.precision, p) and np.allclose(mine.recall, r)
    assert np.allclose(mine.f1, f) and list(mine.support) == list(s)
    assert head.info["metrics"]["val_acc"] == pytest.approx(np.mean(predicted == truth))
    other = probed.per_class_of("toy/thin", "logreg")
    assert list(other.index) == NAMES and other.f1.mean() < per.f1.mean()
    with pytest.raises(KeyError, match="toy/nope"):
        probed.per_class_of("toy/nope", "logreg")


def test_the_report_is_saved_under_the_first_cache(probed, stores):
    folder = Path(probed.report)
    cache = raycache.open_cache("toy", stores["store"])
    assert folder.parent == Path(cache.uri) / "probes"
    saved = json.loads((folder / "result.json").read_text())
    assert saved["best"]["encoder"] == probed.best["encoder"]
    assert len(saved["rows"]) == 9
    row = next(r for r in saved["rows"] if (r["encoder"], r["method"]) == ("toy/proj",
                                                                            "logreg"))
    assert [g["C"] for g in row["grid"]] == [0.01, 0.1, 1.0, 10.0]
    assert set(row["per_class"]) == set(NAMES) and row["classes"] == NAMES
    table = (folder / "table.md").read_text()
    assert all(e in table for e in ("toy/proj", "toy/thin", "toy2/wide", "class-1"))
    for png in ("accuracy.png", "confusion.png", "per_class_f1.png"):
        assert (folder / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    head = raycache.load_head(probed.checkpoint)
    assert probed.checkpoint == str(folder / "head")
    x = stores["table"].column("features").to_pylist()[:20]
    assert set(head.predict(x)) <= set(NAMES)  # raw inputs through the encoder, then the head


def test_integer_labels_and_one_cache_name_columns_plainly(stores):
    result = raycache.probe(config(stores, label="label", methods=["knn"], report=False))
    assert set(result.table.encoder) == {"proj", "thin"}
    assert list(result.per_class.index) == ["0", "1", "2"]
    assert result.report is None and result.checkpoint is None
    with pytest.raises(raycache.RaycacheError, match="saved no head"):
        result.load_head()


@pytest.mark.parametrize(("over", "words"), [
    ({"methods": ["logreg", "svm"]}, ["'svm'", "knn", "logreg"]),
    ({"knn": {"k": [0]}}, ["knn.k=[0]"]),
    ({"logreg": {"C": [-1.0]}}, ["logreg.C=[-1.0]"]),
    ({"val_fraction": 1.5}, ["val_fraction=1.5"]),
    ({"select": "loss"}, ["select='loss'", "macro_f1"]),
    ({"linear": {"train": {"loop": {"epochs": 0}}}, "methods": ["linear"]},
     ["linear:", "epochs=0"]),
])
def test_bad_config_is_named_before_any_work(stores, over, words):
    with pytest.raises(ConfigError) as info:
        raycache.probe(config(stores, **over))
    assert all(w in str(info.value) for w in words), str(info.value)


def test_bad_cache_encoder_or_label_is_named(stores):
    with pytest.raises(raycache.CacheNotFound, match="nope"):
        raycache.probe(config(stores, caches=["nope"]))
    with pytest.raises(ConfigError, match="'minilm'"):
        raycache.probe(config(stores, encoders=["minilm"]))
    with pytest.raises(ConfigError, match="label='topic'"):
        raycache.probe(config(stores, label="topic"))


def test_the_command_line_probes_a_yaml_config_with_overrides(stores, tmp_path, capsys):
    import yaml

    from raycache._cli import main

    path = tmp_path / "probe.yaml"
    path.write_text(yaml.safe_dump(config(stores, methods=["logreg", "knn"])))
    assert main(["probe", "--config", str(path), "--set", "methods=[knn]",
                 "--set", "knn.k=[3]", "--set", "name=by-cli", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "knn" in out and "logreg" not in out and "'k': 3" in out
    assert "probes/by-cli" in out
    assert main(["probe", "--config", str(path), "--set", "methods=[svm]"]) == 3
    assert "'svm'" in capsys.readouterr().err


def test_a_probe_that_trains_heads_opens_each_cache_once(stores, monkeypatch):
    from raycache._cache import finding
    from raycache._probe import plan as probe_plan
    from raycache._train.driver import checks as train_checks

    opened = []

    def counted(name, *args, **kwargs):
        opened.append(name)
        return finding.open_cache(name, *args, **kwargs)

    monkeypatch.setattr(probe_plan, "open_cache", counted)
    monkeypatch.setattr(train_checks, "open_cache", counted)
    raycache.probe(config(stores, encoders=["thin"], methods=["linear"], report=False,
                          linear={"sweep": {"optim.lr": [0.05]}, "train": {"loop": {"epochs": 1}}}))
    assert opened == ["toy"]  # training took the probe's opened cache

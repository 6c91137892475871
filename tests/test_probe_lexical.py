"""The probe's lexical baseline: TF-IDF word and character n-grams + a linear SVM on the
source texts of a text cache's rows, the same key split, as a row of the table (on by default
for text caches), with a plain line when it beats every encoder. In-process: no Ray."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from toy_encoders import WORDS, tiny_text_model

import raycache
from raycache import ConfigError
from raycache._probe.report import markdown
from raycache._probe.result import LEXICAL, Outcome, ProbeResult
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(300)

MARKERS = ("cat", "dog", "bird")
"""Each class's word: the label is which of them a text holds, anywhere among others."""


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("lexical")
    model = tiny_text_model(str(root / "model"))
    rng = np.random.default_rng(0)
    others = [w for w in WORDS if w not in MARKERS]
    labels = rng.integers(0, 3, 240)
    texts = []
    for y in labels:
        words = list(rng.choice(others, 7)) + [MARKERS[y]]
        rng.shuffle(words)
        texts.append(" ".join(words))
    (root / "src").mkdir()
    table = pa.table({"id": [f"t{i:04d}" for i in range(240)], "text": texts,
                      "topic": [f"topic-{y}" for y in labels]})
    pq.write_table(table, root / "src" / "a.parquet")
    raycache.fill({"name": "texts", "source": {"path": str(root / "src"), "labels": ["topic"]},
                   "encoders": [{"name": "tiny", "kind": "hf-text", "input": "text",
                                 "path": model}],
                   "store": {"uri": str(root / "store")}, "in_process": True,
                   "progress": False})
    return {"store": str(root / "store"), "table": table, "root": root}


def probe(store: dict, **over):
    return raycache.probe({"caches": ["texts"], "store": {"uri": store["store"]},
                           "methods": ["logreg", "knn"], "progress": False, "report": False,
                           **over})


def test_the_baseline_is_a_row_scored_on_the_same_split(store):


    result = probe(store)
    table = result.table
    row = table[table.method == LEXICAL]
    assert len(row) == 1 and row.encoder.iloc[0] == "tfidf[text]"
    assert row.val_rows.iloc[0] == table.val_rows.iloc[0]  # the encoders' split
    assert "macro_f1" in table.columns

    assert row.seconds.iloc[0] > 0  # its time, a column of the table
    printed = next(line for line in markdown(result).splitlines()
                   if line.startswith("| tfidf[text] |"))
    assert printed.endswith(f"| {row.seconds.iloc[0]:.1f} |")  # and in the report's table
    assert row.val_acc.iloc[0] > 0.9  # one word decides the class: n-grams find it


def test_the_command_line_prints_the_baselines_seconds(store, tmp_path, capsys, monkeypatch):
    import time

    import yaml

    from raycache._cli import main
    from raycache._probe import lexical

    fit = lexical.fit
    monkeypatch.setattr(lexical, "fit", lambda *a: time.sleep(0.5) or fit(*a))  # >= 0.5 s
    path = tmp_path / "probe.yaml"
    path.write_text(yaml.safe_dump({"caches": ["texts"], "store": {"uri": store["store"]},
                                    "methods": ["knn"], "report": False}))
    assert main(["probe", "--config", str(path), "--no-progress"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.split()[:2] == ["encoder", "method"])
    assert header.split()[-1] == "seconds"
    row = next(line for line in lines if line.split()[:2] == ["tfidf[text]", LEXICAL])
    seconds = row.split()[-1]  # the baseline's, beside the encoders' (val_rows: no point)
    assert "." in seconds and 0.5 <= float(seconds) < 60, row


def full_pipeline(train: list[str], y_train, val: list[str], y_val) -> float:
    """The best validation accuracy of scikit-learn's full TF-IDF pipeline (a vocabulary of
    word 1-2-grams and character 2-5-grams, an L-BFGS logistic regression at C 1, 10, 100):
    the baseline as it was."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_union
    from threadpoolctl import threadpool_limits

    union = make_union(TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True),
                       TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), sublinear_tf=True))
    x_train, x_val = union.fit_transform(train), union.transform(val)
    with threadpool_limits(1):  # its OpenMP threads crawl on busy cores
        return max(float((LogisticRegression(C=c, max_iter=1000).fit(x_train, y_train)
                          .predict(x_val) == y_val).mean()) for c in (1.0, 10.0, 100.0))


def test_the_baseline_is_within_half_a_point_of_the_full_pipeline_on_real_texts():
    from raycache._fit.split import validation_mask
    from raycache._probe import lexical
    from raycache._probe.config import ProbeConfig
    from raycache._probe.data import Features

    docs = raycache.stdlib_docs(per_topic=120)  # real texts: stdlib docstrings, 6 topics
    held = validation_mask(docs.column("id"), 0.2).to_numpy(zero_copy_only=False)
    text = np.array(docs.column("text").to_pylist(), dtype=object)
    y = docs.column("label").to_numpy()
    empty = np.zeros((0, 0), np.float32)
    data = Features("tfidf[text]", None, None, empty, y[~held], empty, y[held])
    lex = lexical.Lexical(None, "text", list(text[~held]), list(text[held]), data)
    mine = max(float((c.pred == y[held]).mean()) for c in lexical.fit(lex, ProbeConfig(["x"])))
    full = full_pipeline(list(text[~held]), y[~held], list(text[held]), y[held])
    assert mine >= full - 0.005, (mine, full)


def test_the_summary_says_when_the_baseline_beats_every_encoder(store):
    result = probe(store)
    lex = result.table[result.table.method == LEXICAL].val_acc.iloc[0]
    best = result.table[result.table.method != LEXICAL].val_acc.max()
    note = result.lexical_note()
    assert lex > best  # the class is one word; the tiny random encoder blurs it
    assert "beats the best encoder row, tiny (" in note
    assert f"by {100 * (lex - best):.1f} points of val_acc" in note
    assert note in result.summary()
    assert "ranked by val_acc" in result.summary()


def outcome(encoder: str, method: str, acc: float) -> Outcome:
    return Outcome(encoder, method, {}, {"val_acc": acc, "macro_f1": acc, "balanced_acc": acc},
                   np.eye(2), ["a", "b"], 10, 5, 0.1)


def test_the_note_names_the_encoder_and_the_gap():
    from raycache._probe.config import ProbeConfig

    cfg = ProbeConfig(caches=["x"])
    won = ProbeResult(cfg, [outcome("minilm", "logreg", 0.930), outcome("minilm", "knn", 0.91),
                            outcome("tfidf[text]", LEXICAL, 0.955)], "val_acc")
    assert won.lexical_note().startswith(
        "a lexical baseline (tfidf[text] tfidf-svm) beats the best encoder row, minilm "
        "(logreg), by 2.5 points of val_acc; to close the gap, try an mlp on minilm")
    lost = ProbeResult(cfg, [outcome("minilm", "logreg", 0.96),
                             outcome("tfidf[text]", LEXICAL, 0.955)], "val_acc")
    assert lost.lexical_note() == "" and "lexical" not in lost.summary()


def test_off_and_on_and_a_cache_with_no_text(store, tmp_path):
    assert LEXICAL not in set(probe(store, lexical=False).table.method)
    (tmp_path / "src").mkdir()
    pq.write_table(separable(n=100), tmp_path / "src" / "a.parquet")
    raycache.fill(toy_fill(str(tmp_path / "src"), str(tmp_path / "store"), in_process=True))
    features = {"caches": ["toy"], "store": {"uri": str(tmp_path / "store")}, "label": "name",
                "methods": ["logreg"], "progress": False, "report": False}
    assert LEXICAL not in set(raycache.probe(features).table.method)  # auto: not text
    with pytest.raises(ConfigError, match=r"lexical: true, but cache toy has no text encoder"):
        raycache.probe({**features, "lexical": True})
    with pytest.raises(ConfigError, match=r"lexical='yes': expected auto, true or false"):
        raycache.probe({**features, "lexical": "yes"})


def test_methods_left_out_run_an_mlp_on_a_small_encoder(store):
    small = {"sweep": {"head": ["mlp"], "optim.lr": [1e-3], "hidden": [[16]]},
             "train": {"loop": {"epochs": 2}}}  # the test's own, to keep it short
    result = probe(store, methods=None, lexical=False, mlp=small)
    assert set(result.table.method) == {"logreg", "knn", "mlp"}  # before: logreg and knn


def test_the_fit_is_one_sgd_svm_at_c_1_on_this_processs_cores():
    from raycache._compute.pool import cores
    from raycache._probe import lexical

    model = lexical.svm(4000)
    assert type(model).__name__ == "SGDClassifier" and model.loss == "hinge"
    assert model.alpha == 1 / (lexical.C * 4000) and model.n_jobs == cores()

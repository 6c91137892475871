"""Benchmark: the probe's lexical baseline against the encoder probe and against the full
scikit-learn TF-IDF pipeline it replaced, on the same rows and split (not a test).

For each N of `--rows`:
- lexical: raycache._probe.lexical.fit (TF-IDF word 1-2 + char 3-4 n-grams, a linear SVM:
  SGD on the hinge loss at C 1 on this process's cores), wall and validation accuracy;
- encoder probe: the probe's default methods on 384-d features of the same rows (logreg over
  its 10 C, knn at k 10 and 20, in this process on the CPU), wall; the features are a cheap
  deterministic text embedding (hashed word counts through a fixed random projection and tanh),
  since what the probe's methods cost depends on rows x dimensions x classes, not the model;
- full: the baseline as it was (TfidfVectorizer word 1-2 + char_wb 2-5, 200k n-grams each,
  LogisticRegression lbfgs at C 1, 10, 100, max_iter 1000), wall and best accuracy;
  `--full-threads 1` runs it on one OpenMP thread (its threads crawl on busy cores).

It prints lexical / encoder probe and lexical / full walls and the accuracy gap (lexical minus
full, in points). Data: real short texts, the first paragraphs of docstrings of the installed
packages, labelled by top-level package (those with at least 200 texts), written once to
`--data`; N rows drawn at random (seeded), split by the key hash training uses.

    python bench/lexical.py --rows 5000 20000
    python bench/lexical.py --rows 5000 20000 50000 --encoder-up-to 0 --full-up-to 0
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import io
import pkgutil
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PACKAGES = ("numpy", "scipy", "sklearn", "pandas", "pyarrow", "torch", "matplotlib", "email",
            "http", "xml", "asyncio", "multiprocessing", "logging", "importlib",
            "fsspec", "requests", "urllib3", "jinja2", "pydantic", "transformers", "tokenizers",
            "ray", "setuptools", "pip", "pytest", "packaging", "click", "rich", "pygments",
            "sympy", "networkx", "PIL", "aiohttp", "huggingface_hub", "datasets",
            "sentence_transformers", "torchmetrics", "duckdb")


def _texts(package: str, modules: int = 400) -> list[str]:
    """First paragraphs (20-300 characters) of the docstrings of a package's modules, classes
    and functions, each once."""
    try:
        root = importlib.import_module(package)
    except Exception:  # noqa: BLE001 - a package that does not import has no texts
        return []
    found = [root]
    for info in pkgutil.walk_packages(getattr(root, "__path__", []), package + ".",
                                      onerror=lambda name: None):
        if "test" in info.name or len(found) > modules:
            continue
        with contextlib.suppress(BaseException):
            found.append(importlib.import_module(info.name))
    seen: dict[str, None] = {}
    for module in found:
        for obj in list(vars(module).values()):
            for o in [obj, *(vars(obj).values() if inspect.isclass(obj) else [])]:
                doc = getattr(o, "__doc__", None) if (
                    inspect.isroutine(o) or inspect.isclass(o) or inspect.ismodule(o)) else None
                if not isinstance(doc, str):
                    continue
                for para in inspect.cleandoc(doc).split("\n\n")[:3]:
                    text = " ".join(para.split())
                    if 20 <= len(text) <= 300 and not text.startswith((">>>", "..", "-", "=")):
                        seen.setdefault(text)
    return list(seen)


def dataset(path: Path):
    """The docstrings table (id, text, label), built once and kept at `path`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.exists():
        return pq.read_table(path)
    rows, argv = [], sys.argv
    sys.argv = argv[:1]  # some modules read the command line as they import
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        for package in PACKAGES:
            if len(texts := _texts(package)) >= 200:
                rows += [(package, t) for t in texts]
    sys.argv = argv
    labels = sorted({p for p, _ in rows})
    table = pa.table({"id": [f"doc-{i:06d}" for i in range(len(rows))],
                      "text": [t for _, t in rows],
                      "label": pa.array([labels.index(p) for p, _ in rows], pa.int64())})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return table


def embed(texts: list[str], dim: int = 384, buckets: int = 4096) -> np.ndarray:
    """A cheap deterministic text embedding: hashed word counts, a fixed projection, tanh."""
    from sklearn.feature_extraction.text import HashingVectorizer

    counts = HashingVectorizer(n_features=buckets, alternate_sign=False).transform(texts)
    proj = np.random.default_rng(0).normal(0, 1, (buckets, dim)).astype(np.float32)
    return np.tanh(counts @ proj).astype(np.float32)


def full(train: list[str], y_train, val: list[str], y_val, threads: int | None) -> float:
    """The best validation accuracy of the baseline as it was."""
    from scipy.sparse import hstack
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    word = TfidfVectorizer(analyzer="word", ngram_range=(1, 2), sublinear_tf=True,
                           max_features=200_000)
    char = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), sublinear_tf=True,
                           max_features=200_000)
    x_train = hstack([word.fit_transform(train), char.fit_transform(train)]).tocsr()
    x_val = hstack([word.transform(val), char.transform(val)]).tocsr()
    with threadpool_limits(threads):
        return max(float((LogisticRegression(C=c, max_iter=1000).fit(x_train, y_train)
                          .predict(x_val) == y_val).mean()) for c in (1.0, 10.0, 100.0))


def one(table, rows: int, args: argparse.Namespace) -> dict[str, float]:
    """The three walls and accuracies on `rows` rows of `table`."""
    from raycache._fit.split import validation_mask
    from raycache._heads.specs import HeadSpec
    from raycache._probe import knn, lexical, logreg
    from raycache._probe.config import ProbeConfig
    from raycache._probe.data import Features

    pick = np.sort(np.random.default_rng(0).permutation(table.num_rows)[:rows])
    t = table.take(pick)
    held = validation_mask(t.column("id"), 0.2).to_numpy(zero_copy_only=False)
    text = np.array(t.column("text").to_pylist(), dtype=object)
    y = t.column("label").to_numpy()
    classes = int(y.max()) + 1
    cfg = ProbeConfig(caches=["bench"])
    out: dict[str, float] = {"rows": rows, "classes": classes}

    start = time.perf_counter()
    empty = np.zeros((0, 0), np.float32)
    lex = lexical.Lexical(None, "text", list(text[~held]), list(text[held]),
                          Features("tfidf[text]", None, None, empty, y[~held], empty, y[held]))
    out["lexical_acc"] = max(float((c.pred == y[held]).mean()) for c in lexical.fit(lex, cfg))
    out["lexical_s"] = time.perf_counter() - start

    if rows > args.encoder_up_to:
        out["encoder_s"] = float("nan")
        return out | _full(text, y, held, rows, args)
    x = embed(list(text))
    spec = HeadSpec("linear", x.shape[1], classes, (), 0.0, ("cheap",), "label", "bench", "-")
    data = Features("cheap", None, spec, x[~held], y[~held], x[held], y[held])
    start = time.perf_counter()
    for fit in (logreg.fit, knn.fit):
        fit(data, cfg, "cpu")
    out["encoder_s"] = time.perf_counter() - start
    return out | _full(text, y, held, rows, args)


def _full(text, y, held, rows: int, args: argparse.Namespace) -> dict[str, float]:
    """The full pipeline's wall and accuracy, where `--full-up-to` allows."""
    if rows > args.full_up_to:
        return {}
    start = time.perf_counter()
    acc = full(list(text[~held]), y[~held], list(text[held]), y[held], args.full_threads)
    return {"full_acc": acc, "full_s": time.perf_counter() - start}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, nargs="+", default=[5000, 20000])
    p.add_argument("--data", type=Path, default=Path(".raycache/bench/docstrings.parquet"))
    p.add_argument("--full-up-to", type=int, default=10**9,
                   help="run the full pipeline only for N up to this")
    p.add_argument("--encoder-up-to", type=int, default=10**9,
                   help="time the encoder probe only for N up to this")
    p.add_argument("--full-threads", type=int, default=None,
                   help="OpenMP threads of the full pipeline's solver (default: as it ran)")
    args = p.parse_args()
    table = dataset(args.data)
    print(f"data: {table.num_rows:,} docstring paragraphs, "
          f"{len(set(table.column('label').to_pylist()))} packages", flush=True)
    print("| rows | classes | lexical s | encoder probe s | lexical / encoder | lexical acc | "
          "full s | full acc | lexical / full | gap (points) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for rows in args.rows:
        r = one(table, rows, args)
        ratio = r["lexical_s"] / r["encoder_s"]
        if "full_s" in r:
            tail = (f"{r['full_s']:.1f} | {r['full_acc']:.4f} | "
                    f"{r['lexical_s'] / r['full_s']:.3f} | "
                    f"{100 * (r['lexical_acc'] - r['full_acc']):+.2f} |")
        else:
            tail = "- | - | - | - |"
        print(f"| {rows:,} | {r['classes']} | {r['lexical_s']:.1f} | {r['encoder_s']:.1f} | "
              f"{ratio:.3f} | {r['lexical_acc']:.4f} | {tail}", flush=True)


if __name__ == "__main__":
    main()

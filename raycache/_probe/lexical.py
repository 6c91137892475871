"""The probe's lexical baseline: TF-IDF of word and character n-grams and a linear SVM
(scikit-learn's SGD on the hinge loss, its classes on this process's cores), on the source texts
of the cache's own rows and the same key split, so that an encoder is compared with what a bag
of n-grams does on the same task, at a small fraction of the encoder probe's time and about the
accuracy of the L-BFGS logistic regression pipeline it replaces (bench/lexical.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from raycache._core.extras import lacking
from raycache._fit.part import label_ids
from raycache._fit.split import validation_mask
from raycache._probe.data import Candidate, Features
from raycache._probe.result import LEXICAL

if TYPE_CHECKING:
    from raycache._cache.committed import Cache
    from raycache._probe.config import ProbeConfig
    from raycache._probe.plan import Target

__all__ = ["C", "CHAR_GRAMS", "EPOCHS", "LEXICAL_ROWS", "MAX_FEATURES", "METHOD", "TEXT_KINDS",
           "Lexical", "Skipped", "baselines", "features", "fit"]

METHOD = LEXICAL
"""The method's name in the probe's table."""
C = 1.0
"""The SVM's inverse L2 strength (the hinge loss summed over rows: alpha = 1 / (C rows)). One C:
from 5,000 to 100,000 rows C=0.3 never beat it by more than the noise of a draw, and a second
fit was a third to a half of the baseline's time (bench/README.md)."""
EPOCHS = 8
"""SGD's passes over the training rows at most (it stops sooner once the loss stalls): 8
scored as 15 did (0.5438 and 0.5437 on 100,000 rows; 0.5325 and 0.5327 on 50,000) in about
0.6 of the fit's time."""
MAX_FEATURES = 200_000
"""The vocabulary's bound per analyzer (word 1-2-grams, character n-grams within words): the
most frequent n-grams of the training rows."""
CHAR_GRAMS = (3, 4)
"""The character n-grams' lengths within words: 3-4 scored as 2-5 and 3-5 did, within the
noise of a draw (two draws each of 5,000, 20,000 and 100,000 rows: -0.5 to +0.7 points against
3-5, -0.07 at 100,000), in 0.5-0.7 of 3-5's features' time and 0.8 of its fit's
(bench/README.md)."""
LEXICAL_ROWS = 200_000
"""lexical: auto runs the baseline on caches of at most this many rows (where it is cheap)."""
TEXT_KINDS = ("hf-text",)
"""Encoder kinds whose input is text."""


class Skipped(Exception):
    """Why a lexical baseline cannot run on a cache (said in the probe's progress; an error
    with lexical: true)."""


@dataclass
class Lexical:
    """One cache's texts for the baseline: the rows' texts and class ids, split by key."""

    target: Target
    column: str
    """The source column of texts (the text encoder's input)."""
    texts_train: list[str]
    texts_val: list[str]
    data: Features
    """Its class ids and split as a probe method's Features (no feature columns)."""


def baselines(cfg: ProbeConfig, found: list[Target]) -> tuple[list[Lexical], list[str]]:
    """(one Lexical per cache with a text encoder, why each other cache has none): with
    lexical: auto, caches past LEXICAL_ROWS or without scikit-learn are left out, and any other
    reason is said; with lexical: true, any reason is an error."""
    if cfg.lexical is False:
        return [], []
    out, skipped = [], []
    for target in list({t.cache.name: t for t in found}.values()):
        try:
            out.append(_read(target, cfg))
        except Skipped as exc:
            if cfg.lexical is True:
                from raycache._errors import ConfigError

                raise ConfigError([f"lexical: true, but {exc}; set lexical: auto (or false) "
                                   "to probe without it"]) from None
            skipped.append(str(exc))
    return out, skipped


def features(train: list[str], val: list[str]) -> tuple[Any, Any]:
    """(training rows, validation rows) as sublinear TF-IDF of word 1-2-grams beside character
    CHAR_GRAMS within words, each of at most MAX_FEATURES n-grams of the training rows and
    L2-normalised, float32 CSR."""
    from scipy.sparse import hstack
    from sklearn.feature_extraction.text import TfidfVectorizer

    x_train, x_val = [], []
    for analyzer, grams in (("word", (1, 2)), ("char_wb", CHAR_GRAMS)):
        tfidf = TfidfVectorizer(analyzer=analyzer, ngram_range=grams, sublinear_tf=True,
                                max_features=MAX_FEATURES, dtype=np.float32)
        x_train.append(tfidf.fit_transform(train))
        x_val.append(tfidf.transform(val))
    return hstack(x_train, format="csr"), hstack(x_val, format="csr")


def fit(lex: Lexical, cfg: ProbeConfig) -> list[Candidate]:
    """The baseline at C: its predictions for the validation rows."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    x_train, x_val = features(lex.texts_train, lex.texts_val)
    with warnings.catch_warnings():  # SGD stops at EPOCHS by design
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = svm(x_train.shape[0]).fit(x_train, lex.data.y_train)
    return [Candidate({"C": C}, model.predict(x_val).astype(np.int64))]


def svm(rows: int) -> Any:
    """A linear SVM at C for `rows` training rows: SGD on the hinge loss for EPOCHS passes,
    whose cost grows with the rows (liblinear's dual solve, once used here, grew faster and was
    3-5x SGD's time at 5,000 rows for the same accuracy), one class against the rest on each of
    this process's cores (joblib threads, which do not spin-wait on busy cores as OpenMP's do)."""
    from sklearn.linear_model import SGDClassifier

    from raycache._compute.pool import cores

    return SGDClassifier(alpha=1 / (C * rows), max_iter=EPOCHS, tol=1e-3, random_state=0,
                         n_jobs=cores())


def _read(target: Target, cfg: ProbeConfig) -> Lexical:
    """The cache's rows with their source texts, or Skipped naming why not."""
    cache = target.cache
    m = cache.manifest
    texts = [e for e in m.encoders if e.kind in TEXT_KINDS]
    where = f"cache {cache.name}"
    if not texts:
        raise Skipped(f"{where} has no text encoder (kinds {list(TEXT_KINDS)})")
    if cfg.lexical == "auto" and m.rows > LEXICAL_ROWS:
        raise Skipped(f"{where} holds {m.rows:,} rows, over {LEXICAL_ROWS:,} (lexical: true "
                      "runs it anyway)")
    if lack := lacking("sklearn", "the lexical baseline"):
        raise Skipped(lack[0])
    column, key = texts[0].input, m.key_column
    source = _source_texts(cache, key, column)
    rows = cache.read_table([key, target.label], verify=False)
    joined = rows.join(source, key, join_type="left outer")
    if missing := joined.column(column).null_count:
        raise Skipped(f"the source of {where} no longer holds a text for {missing} of its "
                      f"{joined.num_rows} rows")
    held = validation_mask(joined.column(key), cfg.val_fraction).to_numpy(zero_copy_only=False)
    y = label_ids(joined.column(target.label), target.spec.class_names)
    text = np.asarray(joined.column(column).to_pylist(), dtype=object)
    name = (f"{cache.name}/tfidf[{column}]" if "/" in target.name else f"tfidf[{column}]")
    empty = np.zeros((0, 0), np.float32)
    data = Features(name, cache, target.spec, empty, y[~held], empty, y[held])
    return Lexical(target, column, list(text[~held]), list(text[held]), data)


def _source_texts(cache: Cache, key: str, column: str) -> pa.Table:
    """The key and text columns of the cache's source files, as its manifest lists them (a
    source staged from memory: its Parquet copy in the store); Skipped where they cannot be
    read or changed since the fill."""
    import pyarrow.csv as pcsv
    import pyarrow.json as pjson
    import pyarrow.parquet as pq

    from raycache._source.file import SourceFile
    from raycache._source.files import changes
    from raycache._source.memory import STAGED

    source, store = cache.manifest.inputs["source"], cache.store
    fmt, tables = source.get("format", "parquet"), []
    for d in source.get("files", []):
        try:
            if "uri" in d:
                f = SourceFile.described(d)
                if changes([f], store.fsspec_options()):
                    raise Skipped(f"source file {f.uri!r} changed since the fill")
                with f.open(store.fsspec_options()) as fh:
                    t = (pq.read_table(fh, columns=[key, column]) if fmt == "parquet" else
                         pjson.read_json(fh) if fmt == "jsonl" else pcsv.read_csv(fh))
            elif "sha256" in d:  # staged from memory: its copy in the store
                with store.fs.open(store.path(STAGED, d["sha256"][:32], "part-0.parquet"),
                                   "rb") as fh:
                    t = pq.read_table(fh, columns=[key, column])
            else:
                raise Skipped(f"the source of cache {cache.name} ({d}) keeps no texts")
        except (OSError, pa.ArrowException, KeyError, ValueError) as exc:
            raise Skipped(f"the source of cache {cache.name} cannot be read "
                          f"({type(exc).__name__}: {exc})") from None
        tables.append(t.select([key, column]))
    if not tables:
        raise Skipped(f"cache {cache.name} lists no source files")
    table = pa.concat_tables(tables, promote_options="default")
    if not pa.types.is_string(table.schema.field(column).type) and \
            not pa.types.is_large_string(table.schema.field(column).type):
        raise Skipped(f"source column {column!r} holds {table.schema.field(column).type}, not "
                      "text")
    return _first_per_key(table, key)


def _first_per_key(table: pa.Table, key: str) -> pa.Table:
    """Each key's first row (a source with duplicate keys: the cache kept one of them)."""
    import pyarrow.compute as pc

    index = pa.array(np.arange(table.num_rows))
    first = pa.table({key: table.column(key), "__i": index}).group_by(
        key, use_threads=False).aggregate([("__i", "min")]).column("__i_min")
    return table.take(pc.sort_indices(first))

"""The probe's lexical baseline: TF-IDF of word and character n-grams and a linear SVM
(scikit-learn's liblinear at two C, SGD at one past SGD_ROWS training rows: one thread, no
OpenMP to contend for busy cores), on the source texts of the cache's own rows and the same
key split, so that an encoder is compared with what a bag of n-grams does on the same task, at a
small fraction of the time of the L-BFGS logistic regression it replaces and about its accuracy
(bench/lexical.py)."""

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

__all__ = ["C_GRID", "EPOCHS", "LEXICAL_ROWS", "MAX_FEATURES", "METHOD", "SGD_C_GRID", "SGD_ROWS",
           "TEXT_KINDS", "TOL", "Lexical", "Skipped", "baselines", "features", "fit", "grid"]

METHOD = LEXICAL
"""The method's name in the probe's table."""
C_GRID = (0.3, 1.0)
"""Inverse L2 strengths tried (liblinear's C: the hinge loss summed over rows, so a larger C is
a weaker penalty), the best picked on the validation rows as every method's setting is. C=3,
once the third, was the slowest fit (over half the fits' time) and never the best at 5,000 or
20,000 rows (bench/lexical.py)."""
SGD_C_GRID = (1.0,)
"""The C tried past SGD_ROWS training rows: C=0.3 never beat C=1 there (20,000 to 100,000
rows, bench/README.md), and its fit was half the baseline's time."""
TOL = 1e-2
"""liblinear's stopping tolerance (its default 1e-4 costs twice the time for the same
accuracy, bench/lexical.py)."""
SGD_ROWS = 10_000
"""Training rows past which the fits are SGD's, not liblinear's: at 20,000 rows (16,010 to
train) SGD at C=1 scored 0.4982 against liblinear's 0.4980, in 0.36 of its time
(bench/README.md)."""
EPOCHS = 15
"""SGD's passes over the training rows."""
MAX_FEATURES = 200_000
"""The vocabulary's bound per analyzer (word 1-2-grams, character 2-5-grams within words): the
most frequent n-grams of the training rows."""
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
    2-5-grams within words, each of at most MAX_FEATURES n-grams of the training rows and
    L2-normalised, float32 CSR."""
    from scipy.sparse import hstack
    from sklearn.feature_extraction.text import TfidfVectorizer

    x_train, x_val = [], []
    for analyzer, grams in (("word", (1, 2)), ("char_wb", (2, 5))):
        tfidf = TfidfVectorizer(analyzer=analyzer, ngram_range=grams, sublinear_tf=True,
                                max_features=MAX_FEATURES, dtype=np.float32)
        x_train.append(tfidf.fit_transform(train))
        x_val.append(tfidf.transform(val))
    return hstack(x_train, format="csr"), hstack(x_val, format="csr")


def grid(rows: int) -> tuple[float, ...]:
    """The C tried for `rows` training rows: C_GRID up to SGD_ROWS, SGD_C_GRID past them."""
    return SGD_C_GRID if rows > SGD_ROWS else C_GRID


def fit(lex: Lexical, cfg: ProbeConfig) -> list[Candidate]:
    """The baseline at each C of its grid: its predictions for the validation rows."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    x_train, x_val = features(lex.texts_train, lex.texts_val)
    out = []
    for c in grid(x_train.shape[0]):
        with warnings.catch_warnings():  # SGD stops at EPOCHS by design
            warnings.simplefilter("ignore", ConvergenceWarning)
            model = _model(c, x_train.shape[0]).fit(x_train, lex.data.y_train)
        out.append(Candidate({"C": c}, model.predict(x_val).astype(np.int64)))
    return out


def _model(c: float, rows: int) -> Any:
    """A linear SVM at C for `rows` training rows: liblinear's up to SGD_ROWS, past them SGD on
    the hinge loss at the same C (alpha = 1 / (C rows)) for EPOCHS passes, whose cost grows
    with the rows, where liblinear's dual solve grows faster."""
    if rows > SGD_ROWS:
        from sklearn.linear_model import SGDClassifier

        return SGDClassifier(alpha=1 / (c * rows), max_iter=EPOCHS, tol=1e-3, random_state=0)
    from sklearn.svm import LinearSVC

    return LinearSVC(C=c, tol=TOL)


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

"""`raycache.evaluate`: a classifier head over labelled rows (a file, a DataFrame, or its run's
own validation keys), scored against their labels (no Ray: the head and its encoders here)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from raycache._core.extras import need
from raycache._errors import RaycacheError, SourceError
from raycache._predict.evaluation import Evaluation, check_folder, evaluation_of

if TYPE_CHECKING:
    from raycache._heads.loaded import Head
    from raycache._train.driver.result import TrainResult

__all__ = ["BATCH_ROWS", "evaluate"]

BATCH_ROWS = 4096
"""Rows per call of the head's encoders."""


def evaluate(checkpoint: str | TrainResult, data: Any = None, *, label: str | None = None,
             output: str | None = None, overwrite: bool = False,
             trust_code: bool | Sequence[str] = False, progress: bool = True,
             **options: Any) -> Evaluation:
    """Score a classifier head on labelled rows: accuracy, macro-F1, per-class precision,
    recall and F1 by class name, and the confusion matrix.

    Args:
        checkpoint: The head's checkpoint folder (or a run folder, or a TrainResult).
        data: A labelled Parquet, JSONL or CSV file (or folder or glob), a pandas DataFrame or
            pyarrow Table with the head's input column(s) and its label; None: the run's own
            validation keys, read from its cache (a TrainResult, or a checkpoint or run
            folder in its cache's runs/, whose run.json gives the split).
        label: The label column of `data` (default: the label the head was trained on).
        output: A local folder to write evaluation.json, confusion.txt and confusion.png
            (checked before anything is read).
        overwrite: Replace those files where `output` already holds an evaluation.
        trust_code: Let head.json name code to run (see `load_head`): True for any, or the
            allowed prefixes of factory paths.
        progress: Show the encoding of `data`'s rows: a bar on a terminal, a line per batch
            of BATCH_ROWS rows otherwise (on stderr; the rate counts from the first batch, so
            the encoders' load is left out of it).
        **options: fsspec storage options for the checkpoint and the files.

    Returns:
        The scores; `summary()`, `table()` and `confusion_table()` print them.

    Raises:
        RaycacheError: The head is not a classifier; data is None and the checkpoint is not
            in its run's folder (a copied head); the
            data holds no rows; the label column is missing, has nulls, is not of the head's
            label type (integer ids or names) or holds classes the head does not know;
            `output` is a file, or holds an evaluation and `overwrite` is False.
        SourceError: A file cannot be listed or read.

    Example:
        ```python
        ev = raycache.evaluate(run.checkpoint, "test.jsonl")
        print(ev.summary())
        print(ev.table())
        ```
    """
    from raycache._heads.loaded import load_head
    from raycache._train.folder.record import checkpoint_of

    if output:
        need("matplotlib", "evaluate's confusion.png (an output folder)")
        check_folder(output, overwrite)
    run = None if isinstance(checkpoint, str) else checkpoint
    path = checkpoint_of(checkpoint, options) if run is None else run.checkpoint
    head = (load_head(path, trust_code=trust_code, **options) if run is None
            else run.load_head(trust_code=trust_code))
    if head.spec.objective != "classification":
        raise RaycacheError(f"checkpoint {path!r} holds a {head.spec.objective!r} head: it has "
                            "no classes to score; evaluate a classification head")
    label = label or head.spec.label
    if data is None:
        from raycache._predict.held_out import held_out_rows, split_of

        rows = (held_out_rows(run.cache, run.spec.recipe.evaluation.val_fraction, head, label)
                if run is not None else held_out_rows(*split_of(path, head, options), head,
                                                      label))
        return _done(_on_validation(rows, head, label, path), output)
    table, what = _table(data, options)
    if not table.num_rows:
        raise RaycacheError(f"{what} holds no rows to score (its columns: "
                            f"{table.column_names}); evaluate on a file with labelled rows")
    if label not in table.column_names:
        raise RaycacheError(f"{what} has no label column {label!r} (its columns: "
                            f"{table.column_names}); name it with label=... (--label)")
    truth = _class_ids(head, table.column(label), label, what)
    inputs = [c.input for c in head.encoder_configs()]
    if missing := [c for c in inputs if c not in table.column_names]:
        raise RaycacheError(f"{what} lacks the head's input column(s) {missing} (its columns: "
                            f"{table.column_names})")
    predicted = _encoded(head, table, inputs, progress)
    return _done(evaluation_of(path, what, label, _names(head), truth, predicted), output)


def _encoded(head: Head, table: pa.Table, inputs: list[str], progress: bool) -> np.ndarray:
    """The head's class ids for every row of `table`, encoded BATCH_ROWS at a time with a bar
    of rows; its rate counts from the first batch's end (the encoders load in that one)."""
    from raycache._core.steps import rows_bar

    out = []
    with rows_bar(progress, table.num_rows, "evaluate: encoding") as bar:
        for i in range(0, table.num_rows, BATCH_ROWS):
            out.append(head.predict_ids(head.features(
                {c: table.column(c).slice(i, BATCH_ROWS).to_pylist() for c in inputs})))
            bar.update(len(out[-1]))
    return np.concatenate(out)


def _done(ev: Evaluation, output: str | None) -> Evaluation:
    if output:
        ev.save(output)
    return ev


def _names(head: Head) -> list[str]:
    return [str(c) for c in head.classes]


def _table(data: Any, options: dict[str, Any]) -> tuple[pa.Table, str]:
    """The rows of `data` as one Arrow table, and what it is in words. Each file is read
    whole into Arrow's memory on this thread before pyarrow parses it: pyarrow's readers given
    the open Python file read it on their own threads, and one dropping the scan's last
    reference to it while the interpreter finalised (after a refusal, say) aborted the exit
    (134) instead of its exit code."""
    if isinstance(data, pa.Table):
        return data, "a pyarrow Table"
    if type(data).__name__ == "DataFrame":
        return pa.Table.from_pandas(data, preserve_index=False), "a DataFrame"
    if not isinstance(data, str):
        raise RaycacheError(f"data is a {type(data).__name__}; expected a file path or URI, a "
                            "pandas DataFrame, a pyarrow Table, or None (the run's validation "
                            "keys)")
    import pyarrow.parquet as pq

    from raycache._source.config import SourceConfig
    from raycache._source.files import list_files, parse_text

    fmt, files = list_files(SourceConfig(path=data, options=options))
    tables = []
    for f in files:
        try:
            blob = pa.BufferReader(f.whole(options))
            tables.append(pq.read_table(blob) if fmt == "parquet" else parse_text(blob, fmt))
        except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
            raise SourceError(f"{f.uri!r} cannot be read as {fmt} ({type(exc).__name__}: "
                              f"{exc}); pass a whole, UTF-8 {fmt} file") from exc
    return pa.concat_tables(tables, promote_options="default"), repr(data)


def _class_ids(head: Head, values: pa.ChunkedArray | pa.Array, label: str, what: str
               ) -> np.ndarray:
    """The label values as the head's class ids; nulls, values of another type than the
    head's integer ids (bool, float, text: never matched as 1 == True) and unknown classes
    refused by name. A named head's classes match the values' text."""
    if values.null_count:
        raise RaycacheError(f"label column {label!r} of {what} is null in {values.null_count} "
                            "row(s); every row evaluated needs its label: fill or drop them")
    kind = values.type.value_type if pa.types.is_dictionary(values.type) else values.type
    if not head.spec.class_names and not pa.types.is_integer(kind):
        raise RaycacheError(
            f"label column {label!r} of {what} holds {kind} values; the head's classes are "
            f"the integer ids {list(head.classes)[:20]} (its training label "
            f"{head.spec.label!r}): cast the column to those integers (a bool: False -> 0, "
            "True -> 1) or name the integer label column with label=... (--label)")
    found = values.to_pylist()
    known = {c: i for i, c in enumerate(head.classes)}
    if head.spec.class_names:
        found = [v if isinstance(v, str) else str(v) for v in found]
    unknown = sorted({v for v in found if v not in known}, key=str)
    if unknown:
        raise RaycacheError(
            f"label column {label!r} of {what} holds {len(unknown)} value(s) the head does not "
            f"know, e.g. {unknown[:5]}; its classes are {list(head.classes)[:20]}. Evaluate on "
            "data labelled as the head's training data was")
    return np.fromiter((known[v] for v in found), np.int64, len(found))


def _on_validation(rows: tuple[pa.Table, str], head: Head, label: str, path: str
                   ) -> Evaluation:
    """The run's held-out rows (`held_out_rows`): their embeddings through the head."""
    table, what = rows
    x = np.concatenate([table.column(e).combine_chunks().flatten().to_numpy(
        zero_copy_only=False).astype(np.float32).reshape(table.num_rows, -1)
        for e in head.spec.encoders], axis=1)
    truth = _class_ids(head, table.column(label), label, what)
    predicted = head.predict_ids(x)
    return evaluation_of(path, what, label, _names(head), truth, predicted)

"""What a probe returns: one Outcome per (encoder, method), and the ProbeResult over them (the
table, per-class metrics, the best row and its head)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from raycache._cache.store import Store
from raycache._probe.config import ProbeConfig
from raycache._probe.metrics import per_class

if TYPE_CHECKING:
    import pandas as pd

    from raycache._heads.loaded import Head
    from raycache._heads.specs import HeadSpec

__all__ = ["COLUMNS", "LEXICAL", "Outcome", "ProbeResult", "setting_text"]

COLUMNS = ["encoder", "method", "setting", "val_acc", "macro_f1", "balanced_acc", "train_rows",
           "val_rows", "seconds"]
"""The table's columns, in order."""
LEXICAL = "tfidf-svm"
"""The lexical baseline's method (raycache._probe.lexical.METHOD)."""


@dataclass
class Outcome:
    """One (encoder, method): its selected setting, its scores and its confusion matrix.

    Example:
        ```python
        best = raycache.probe("probe.yaml").best_outcome
        print(best.encoder, best.method, best.setting, best.scores["val_acc"])
        ```
    """

    encoder: str
    """The embedding column probed."""
    method: str
    """The method (a METHODS key: logreg, knn, linear, mlp)."""
    setting: dict[str, Any]
    """The setting `select` picked, e.g. {"C": 0.3} or {"k": 20}."""
    scores: dict[str, float]
    """val_acc, macro_f1 and balanced_acc of that setting on the validation rows."""
    confusion: np.ndarray
    """Its confusion matrix: rows the true class, columns the predicted one."""
    classes: list[str]
    """The class names, in the confusion matrix's order."""
    train_rows: int
    """Rows it was fitted on."""
    val_rows: int
    """Rows it was scored on (held out by a hash of the key)."""
    seconds: float
    """Wall time of the method on this encoder, every setting included."""
    grid: list[dict[str, Any]] = field(default_factory=list)
    """Every setting tried, with its scores."""
    head_spec: HeadSpec | None = field(default=None, repr=False)
    """The selected setting's head, where the method makes one (logreg, linear, mlp); None for
    knn and the lexical baseline."""
    head_weights: dict[str, Any] | None = field(default=None, repr=False)
    """That head's state_dict, where it was fitted in this process (logreg); else None."""
    head_checkpoint: str | None = field(default=None, repr=False)
    """That head's checkpoint folder, where a training run made it (linear, mlp); else None."""

    @property
    def has_head(self) -> bool:
        """Whether the selected setting is a head the report can save (weights or a
        checkpoint)."""
        return self.head_weights is not None or self.head_checkpoint is not None

    def row(self) -> dict[str, Any]:
        """Its row of the probe's table.

        Returns:
            encoder, method, setting, the scores, train_rows, val_rows and seconds.
        """
        return {"encoder": self.encoder, "method": self.method, "setting": self.setting,
                **self.scores, "train_rows": self.train_rows, "val_rows": self.val_rows,
                "seconds": self.seconds}

    def per_class(self) -> dict[str, dict[str, float]]:
        """Precision, recall, F1 and support of each class, from the confusion matrix.

        Returns:
            class name -> {"precision", "recall", "f1", "support"}.
        """
        return per_class(self.confusion, self.classes)


@dataclass
class ProbeResult:
    """What a probe found: one outcome per (encoder, method), the table, the best row.

    Example:
        ```python
        result = raycache.probe({"caches": ["docs"], "methods": ["logreg", "knn"]})
        result.table     # one row per (encoder, method), best first
        result.best      # the winning row
        head = result.load_head()
        ```
    """

    config: ProbeConfig
    """The config it ran."""
    outcomes: list[Outcome]
    """One per (encoder, method), in the order probed."""
    select: str
    """The metric that picks each method's setting and the best row."""
    report: str | None = None
    """URI of the report folder (result.json, table.md, PNGs), when written."""
    checkpoint: str | None = None
    """URI of the best head's checkpoint folder (load_head opens it): the best row's, or where
    the best is no head (knn), the best head's."""
    where: str = ""
    """Where it ran and why: in this process, or on Ray with N workers (num_workers)."""

    @property
    def table(self) -> pd.DataFrame:
        """One row per (encoder, method), best first by `select`."""
        import pandas as pd

        frame = pd.DataFrame([o.row() for o in self.outcomes], columns=COLUMNS)
        return frame.sort_values(self.select, ascending=False, kind="stable").reset_index(
            drop=True)

    @property
    def best(self) -> dict[str, Any]:
        """The winning row (by `select`; the first of equals in the order probed)."""
        return self.best_outcome.row()

    @property
    def best_outcome(self) -> Outcome:
        """The winning (encoder, method)'s Outcome: its grid, confusion matrix and classes."""
        return max(self.outcomes, key=lambda o: o.scores[self.select])

    @property
    def per_class(self) -> pd.DataFrame:
        """The best row's precision, recall, f1 and support, one row per class name."""
        return self.per_class_of(self.best_outcome.encoder, self.best_outcome.method)

    def per_class_of(self, encoder: str, method: str) -> pd.DataFrame:
        """One (encoder, method)'s precision, recall, f1 and support per class.

        Args:
            encoder: The embedding column, as in the table's `encoder` column.
            method: The method, as in the table's `method` column.

        Returns:
            One row per class name (the index, named "class").

        Raises:
            KeyError: The table has no row for that encoder and method.

        Example:
            ```python
            result.per_class_of("minilm", "knn").sort_values("f1")
            ```
        """
        import pandas as pd

        found = [o for o in self.outcomes if (o.encoder, o.method) == (encoder, method)]
        if not found:
            raise KeyError(f"no row for encoder {encoder!r} and method {method!r}; the table "
                           f"has {[(o.encoder, o.method) for o in self.outcomes]}")
        frame = pd.DataFrame.from_dict(found[0].per_class(), orient="index")
        frame.index.name = "class"
        return frame

    def load_head(self, trust_code: bool | Sequence[str] = False) -> Head:
        """The best head, as a trained run's (predict, predict_embeddings).

        Args:
            trust_code: Let head.json name code to run (see `raycache.load_head`): True for
                any, or the allowed prefixes of factory paths.

        Returns:
            The head saved with the report: the best row's, or where the best is no head
            (knn), the best head's.

        Raises:
            RaycacheError: The probe saved no head (report: false, or no method that trains
                one), or its checkpoint is unreadable.
            StoreError: The store cannot be reached (StoreUnavailable: after its retries).

        Example:
            ```python
            head = result.load_head()
            head.predict(["Return the cosine of x."])
            ```
        """
        from raycache._errors import RaycacheError
        from raycache._heads.loaded import load_head

        if self.checkpoint is None:
            raise RaycacheError("this probe saved no head (report: false, or no method that "
                                "trains one); set report: true and add logreg or linear")
        return load_head(self.checkpoint, trust_code=trust_code,
                         **Store.from_config(self.config.store).fsspec_options())

    def summary(self) -> str:
        """The probe in one line: how many encoders and methods, where it ran, the best row,
        the report.

        Returns:
            The line.
        """
        b = self.best
        report = f"; report {self.report}" if self.report else ""
        ran = f" ({self.where.split(':')[0]})" if self.where else ""
        return (f"probe of {len({o.encoder for o in self.outcomes})} encoder(s) x "
                f"{len({o.method for o in self.outcomes})} method(s){ran}, ranked by "
                f"{self.select}: best {b['encoder']} {b['method']} {setting_text(b['setting'])}, "
                f"{self.select} {b[self.select]:.4f}, macro_f1 {b['macro_f1']:.4f}{report}"
                + (f"\n{beats}" if (beats := self.lexical_note()) else ""))

    def to_dict(self) -> dict[str, Any]:
        """The probe as JSON-ready values (`--json`): the table's rows best first, the best
        row, where it ran, the report and checkpoint; never the config (its store's options).

        Returns:
            A dict of plain values.
        """
        return {"select": self.select, "where": self.where, "report": self.report,
                "checkpoint": self.checkpoint, "best": self.best,
                "rows": self.table.to_dict(orient="records"), "note": self.lexical_note()}

    def lexical_note(self) -> str:
        """A plain line where the lexical baseline beats the best encoder row of any method,
        with what might close the gap.

        Returns:
            E.g. "a lexical baseline (tfidf[text] tfidf-svm) beats the best encoder row,
            minilm (mlp), by 0.3 points of val_acc; to close the gap, try ..."; "" where an
            encoder scores as well (or no baseline ran).
        """
        lexical = [o for o in self.outcomes if o.method == LEXICAL]
        encoders = [o for o in self.outcomes if o.method != LEXICAL]
        if not lexical or not encoders:
            return ""
        lex = max(lexical, key=lambda o: o.scores[self.select])
        best = max(encoders, key=lambda o: o.scores[self.select])
        gap = 100 * (lex.scores[self.select] - best.scores[self.select])
        if gap <= 0:
            return ""
        return (f"a lexical baseline ({lex.encoder} {lex.method}) beats the best encoder row, "
                f"{best.encoder} ({best.method}), by {gap:.1f} points of {self.select}; to "
                f"close the gap, try {'; '.join(self._closers(best))}")

    def _closers(self, best: Outcome) -> list[str]:
        """What might close a lexical baseline's lead over `best`: a head not yet run on its
        encoder, a larger encoder, more rows."""
        ran = {o.method for o in self.outcomes if o.encoder == best.encoder}
        out = [f"an mlp on {best.encoder} (methods: [{', '.join(sorted(ran))}, mlp]; it was "
               "not run)"] if "mlp" not in ran else []
        out.append(f"a larger encoder than {best.encoder} (a sentence-transformers model by its "
                   "Hugging Face id, e.g. sentence-transformers/all-mpnet-base-v2 or "
                   "BAAI/bge-base-en-v1.5, filled into the cache)")
        out.append(f"more labelled rows ({best.train_rows:,} trained on)")
        return out

    def __repr__(self) -> str:
        return f"ProbeResult({self.summary()})"


def setting_text(setting: dict[str, Any]) -> str:
    """A setting as "(k=v, ...)"."""
    return "(" + ", ".join(f"{k}={v}" for k, v in setting.items()) + ")"

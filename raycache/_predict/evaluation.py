"""Evaluation: a classifier head's scores on labelled rows (accuracy, macro-F1, per-class
precision/recall/F1 by class name, the confusion matrix), as a table, JSON and a PNG."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from raycache._core.extras import need
from raycache._errors import RaycacheError
from raycache._probe.metrics import per_class, scores

__all__ = ["WRITTEN", "Evaluation", "check_folder", "evaluation_of"]

WRITTEN = ("evaluation.json", "confusion.txt", "confusion.png")
"""The files `Evaluation.save` writes into its folder."""


@dataclass
class Evaluation:
    """A head's scores on labelled rows, as `raycache.evaluate` returns them.

    Example:
        ```python
        ev = raycache.evaluate(run.checkpoint, "test.jsonl")
        print(ev.summary())
        print(ev.table())            # per class: precision, recall, F1, support
        ev.save("eval")              # evaluation.json, confusion.png
        ```
    """

    checkpoint: str
    """The head's checkpoint folder."""
    data: str
    """What was evaluated, in words: a file, a DataFrame, or the run's validation keys."""
    label: str
    """The label column read from the data."""
    rows: int
    """Rows evaluated."""
    classes: list[str]
    """The head's classes (names, or ids as text), in its output order."""
    confusion: np.ndarray
    """counts[i, j]: rows of true class i predicted as class j (classes order)."""
    accuracy: float = 0.0
    """The fraction of rows predicted right."""
    macro_f1: float = 0.0
    """F1 averaged over the classes that occur or are predicted (scikit-learn's macro)."""
    balanced_accuracy: float = 0.0
    """Recall averaged over the classes that occur."""
    per_class: dict[str, dict[str, float]] = field(default_factory=dict)
    """Each class's precision, recall, f1 and support, by its name."""

    def summary(self) -> str:
        """The scores in one line.

        Returns:
            Rows, accuracy, macro-F1 and balanced accuracy, and what was evaluated.
        """
        return (f"evaluate {self.data}: {self.rows} rows, accuracy {self.accuracy:.4f}, "
                f"macro-F1 {self.macro_f1:.4f}, balanced accuracy "
                f"{self.balanced_accuracy:.4f} ({len(self.classes)} classes, label "
                f"{self.label!r})")

    def table(self) -> str:
        """Per class: precision, recall, F1 and support, one line each.

        Returns:
            The table as text, classes in the head's order.
        """
        width = max([5, *map(len, self.classes)])
        lines = [f"{'class':<{width}}  precision  recall      f1  support"]
        for name, s in self.per_class.items():
            lines.append(f"{name:<{width}}  {s['precision']:9.4f}  {s['recall']:6.4f}  "
                         f"{s['f1']:6.4f}  {s['support']:7d}")
        return "\n".join(lines)

    def confusion_table(self) -> str:
        """The confusion matrix as text: a row per true class, a column per predicted one.

        Returns:
            The matrix, with class names on both sides.
        """
        width = max([4, *map(len, self.classes), len(str(int(self.confusion.max(initial=0))))])
        head = " " * width + "  " + " ".join(f"{c:>{width}}" for c in self.classes)
        rows = [f"{c:<{width}}  " + " ".join(f"{int(n):>{width}}" for n in row)
                for c, row in zip(self.classes, self.confusion, strict=True)]
        return "\n".join(["true \\ predicted", head, *rows])

    def to_dict(self) -> dict[str, Any]:
        """Everything as plain JSON values.

        Returns:
            The scores, per-class scores and the confusion matrix (a list of rows).
        """
        return {"checkpoint": self.checkpoint, "data": self.data, "label": self.label,
                "rows": self.rows, "accuracy": self.accuracy, "macro_f1": self.macro_f1,
                "balanced_accuracy": self.balanced_accuracy, "classes": self.classes,
                "per_class": self.per_class, "confusion": self.confusion.tolist()}

    def save(self, folder: str) -> list[str]:
        """Write evaluation.json, confusion.txt and confusion.png into a local folder.

        Args:
            folder: The folder (made if missing; files of an earlier evaluation replaced).

        Returns:
            The paths written.

        Raises:
            RaycacheError: `folder` (or a folder above it) is a file, or cannot be written.
        """
        from raycache._probe.figures import confusion_png

        need("matplotlib", "Evaluation.save's confusion.png")
        out = check_folder(folder, overwrite=True)
        written = dict(zip(WRITTEN, [
            json.dumps(self.to_dict(), indent=2).encode(),
            (self.confusion_table() + "\n\n" + self.table() + "\n").encode(),
            confusion_png(self.confusion, self.classes,
                          f"{self.data}: accuracy {self.accuracy:.3f}")], strict=True))
        try:
            out.mkdir(parents=True, exist_ok=True)
            for name, blob in written.items():
                (out / name).write_bytes(blob)
        except OSError as exc:
            raise RaycacheError(f"evaluation folder {folder!r} cannot be written "
                                f"({type(exc).__name__}: {exc}); name a folder you can write"
                                ) from exc
        return [str(out / name) for name in written]


def check_folder(folder: str, overwrite: bool) -> Path:
    """`folder` as a Path, refused where it (or the nearest existing folder above it) is a
    file, or where it holds an evaluation's files and `overwrite` is False."""
    out = Path(folder)
    there = next((p for p in (out, *out.parents) if p.exists()), None)
    if there is not None and not there.is_dir():
        raise RaycacheError(
            f"evaluation output {folder!r}: {str(there)!r} is a file, not a folder; output "
            f"names a folder to write {', '.join(WRITTEN)} into: name another path")
    if not overwrite and (held := [n for n in WRITTEN if (out / n).exists()]):
        raise RaycacheError(
            f"evaluation output {folder!r} already holds {held} (an earlier evaluation); pass "
            "overwrite=True (--overwrite) to replace them, or name another folder")
    return out


def evaluation_of(checkpoint: str, data: str, label: str, classes: list[str],
                  truth: np.ndarray, predicted: np.ndarray) -> Evaluation:
    """The Evaluation of class ids `predicted` against `truth` (both 0..len(classes)-1)."""
    k = len(classes)
    conf = np.bincount(truth.astype(np.int64) * k + predicted.astype(np.int64),
                       minlength=k * k).reshape(k, k)
    s = scores(conf)
    return Evaluation(checkpoint, data, label, int(len(truth)), classes, conf,
                      s["val_acc"], s["macro_f1"], s["balanced_acc"], per_class(conf, classes))

"""PROBE: every chosen method on every encoder's features, the same key split for all; the
table, per-class metrics and the best row, and the report saved under the store."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from raycache.cache.store import Store
from raycache.probe.config import ProbeConfig
from raycache.probe.data import Candidate, Features
from raycache.probe.metrics import confusion, per_class, scores
from raycache.probe.plan import load_config, targets

if TYPE_CHECKING:
    import pandas as pd

    from raycache.heads.loaded import Head

__all__ = ["COLUMNS", "Outcome", "ProbeResult", "probe"]

COLUMNS = ["encoder", "method", "setting", "val_acc", "macro_f1", "balanced_acc", "train_rows",
           "val_rows", "seconds"]
"""The table's columns, in order."""


@dataclass
class Outcome:
    """One (encoder, method): its selected setting, its scores and its confusion matrix."""

    encoder: str
    method: str
    setting: dict[str, Any]
    scores: dict[str, float]
    confusion: np.ndarray
    classes: list[str]
    train_rows: int
    val_rows: int
    seconds: float
    grid: list[dict[str, Any]] = field(default_factory=list)
    """Every setting tried, with its scores."""
    candidate: Candidate | None = field(default=None, repr=False)

    def row(self) -> dict[str, Any]:
        return {"encoder": self.encoder, "method": self.method, "setting": self.setting,
                **self.scores, "train_rows": self.train_rows, "val_rows": self.val_rows,
                "seconds": self.seconds}

    def per_class(self) -> dict[str, dict[str, float]]:
        return per_class(self.confusion, self.classes)


@dataclass
class ProbeResult:
    config: ProbeConfig
    outcomes: list[Outcome]
    select: str
    report: str | None = None
    """URI of the report folder (result.json, table.md, PNGs), when written."""
    checkpoint: str | None = None
    """URI of the best head's checkpoint folder (load_head opens it): the best row's, or where
    the best is no head (knn), the best head's."""

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
        return max(self.outcomes, key=lambda o: o.scores[self.select])

    @property
    def per_class(self) -> pd.DataFrame:
        """The best row's precision, recall, f1 and support, one row per class name."""
        return self.per_class_of(self.best_outcome.encoder, self.best_outcome.method)

    def per_class_of(self, encoder: str, method: str) -> pd.DataFrame:
        import pandas as pd

        found = [o for o in self.outcomes if (o.encoder, o.method) == (encoder, method)]
        if not found:
            raise KeyError(f"no row for encoder {encoder!r} and method {method!r}; the table "
                           f"has {[(o.encoder, o.method) for o in self.outcomes]}")
        frame = pd.DataFrame.from_dict(found[0].per_class(), orient="index")
        frame.index.name = "class"
        return frame

    def load_head(self) -> Head:
        """The best head, as a trained run's (predict, predict_embeddings)."""
        from raycache.errors import RaycacheError
        from raycache.heads.loaded import load_head

        if self.checkpoint is None:
            raise RaycacheError("this probe saved no head (report: false, or no method that "
                                "trains one); set report: true and add logreg or linear")
        return load_head(self.checkpoint, **Store.from_config(self.config.store)
                         .fsspec_options())

    def summary(self) -> str:
        b = self.best
        where = f"; report {self.report}" if self.report else ""
        return (f"probe of {len({o.encoder for o in self.outcomes})} encoder(s) x "
                f"{len({o.method for o in self.outcomes})} method(s): best {b['encoder']} "
                f"{b['method']} {_setting_text(b['setting'])}, {self.select} "
                f"{b[self.select]:.4f}{where}")

    def __repr__(self) -> str:
        return f"ProbeResult({self.summary()})"


def _setting_text(setting: dict[str, Any]) -> str:
    return "(" + ", ".join(f"{k}={v}" for k, v in setting.items()) + ")"


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        from raycache.errors import ConfigError

        raise ConfigError(["device='cuda': this machine has no CUDA GPU; set device: cpu or "
                           "auto"])
    return device


def score(data: Features, method: str, candidates: list[Candidate], select: str,
          seconds: float) -> Outcome:
    """The candidate that `select` picks (the first of equals), with every setting's scores."""
    k = data.spec.num_classes
    grid, best, best_conf = [], None, None
    for c in candidates:
        conf = confusion(data.y_val, c.pred, k)
        s = scores(conf)
        grid.append({**c.setting, **s})
        if best is None or s[select] > scores(best_conf)[select]:
            best, best_conf = c, conf
    assert best is not None and best_conf is not None
    return Outcome(data.encoder, method, best.setting, scores(best_conf), best_conf,
                   data.classes, len(data.y_train), len(data.y_val), seconds, grid, best)


def probe(config: ProbeConfig | dict | str | Path, *, progress: bool | None = None
          ) -> ProbeResult:
    """Run the config's methods on each encoder of its caches (one label, the same key split
    as training), in this process; the report and best head saved under the first cache."""
    from raycache.probe import METHODS

    cfg = load_config(config)
    if progress is not None:
        cfg.progress = progress
    store = Store.from_config(cfg.store)
    store.check_reachable()
    found = targets(cfg, store)  # bad input fails here, before any read
    device = resolve_device(cfg.device)
    from raycache.probe.load import read

    outcomes = []
    for data in read(found, cfg.val_fraction):
        for method in cfg.methods:
            start = time.perf_counter()
            candidates = METHODS[method](data, cfg, device)
            out = score(data, method, candidates, cfg.select, time.perf_counter() - start)
            outcomes.append(out)
            if cfg.progress:
                print(f"probe {out.encoder} {method} {_setting_text(out.setting)}: "
                      + ", ".join(f"{k} {v:.4f}" for k, v in out.scores.items())
                      + f" ({out.seconds:.1f} s)", flush=True)
    result = ProbeResult(cfg, outcomes, cfg.select)
    if cfg.report:
        from raycache.probe.report import write

        caches = list({t.cache.name: t.cache for t in found}.values())
        result.report, result.checkpoint = write(result, caches)
    return result

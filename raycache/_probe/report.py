"""A probe's report under the store, `<cache>/probes/<name>/`: result.json, table.md, three
PNGs (accuracy by encoder and method, the best's confusion matrix, its per-class F1) and the
best head as a checkpoint folder `head/` that load_head opens."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from raycache._cache.committed import Cache
from raycache._cache.store import Store
from raycache._heads.specs import HEAD_CONFIG, HEAD_WEIGHTS
from raycache._heads.weights import encode, read

if TYPE_CHECKING:
    from raycache._probe.result import Outcome, ProbeResult

__all__ = ["PROBES", "RESULT", "TABLE", "name_of", "write"]

PROBES = "probes"
"""Folder of a cache's probe reports, beside runs/."""
RESULT, TABLE, HEAD = "result.json", "table.md", "head"
FIGURES = ("accuracy.png", "confusion.png", "per_class_f1.png")


def name_of(result: ProbeResult, caches: list[Cache]) -> str:
    """The config's name, or one derived from what was probed (the same probe, the same
    folder: a rerun replaces its report)."""
    cfg = result.config
    if cfg.name:
        return cfg.name
    what = {"caches": [f"{c.name}/{c.fingerprint}" for c in caches], "label": cfg.label,
            "encoders": cfg.encoders, "methods": cfg.methods, "val_fraction": cfg.val_fraction,
            "logreg": repr(cfg.logreg), "knn": repr(cfg.knn), "linear": repr(cfg.linear),
            "mlp": repr(cfg.mlp), "select": cfg.select}
    return "probe-" + hashlib.sha256(json.dumps(what, sort_keys=True, default=str)
                                     .encode()).hexdigest()[:12]


def write(result: ProbeResult, caches: list[Cache]) -> tuple[str, str | None]:
    """Write the report into the first cache's probes/ folder: (its URI, the head's URI or
    None where no method trained a head)."""
    cache, store = caches[0], caches[0].store
    folder = store.path(cache.name, cache.fingerprint, PROBES, name_of(result, caches))
    head = _write_head(result, store, f"{folder}/{HEAD}", cache.manifest.key_column)
    record = {"select": result.select, "best": _plain(result.best),
              "head": store.url(head) if head else None,
              "rows": [_plain(o.row()) | {"grid": _plain(o.grid),
                                          "per_class": o.per_class(),
                                          "confusion": o.confusion.tolist(),
                                          "classes": o.classes}
                       for o in result.outcomes]}
    store.write_atomic(f"{folder}/{RESULT}", json.dumps(record, indent=2).encode())
    store.write_atomic(f"{folder}/{TABLE}", markdown(result).encode())
    from raycache._probe.figures import accuracy, confusion, per_class_f1

    best = result.best_outcome
    for name, png in zip(FIGURES, (accuracy(result.outcomes, result.select), confusion(best),
                                   per_class_f1(best)), strict=True):
        store.write_atomic(f"{folder}/{name}", png)
    return store.url(folder), store.url(head) if head else None


def markdown(result: ProbeResult) -> str:
    """The table, best first (each row's seconds: the lexical baseline's cost beside the
    encoders'), then the best row's per-class metrics."""
    table = result.table
    lines = ["| encoder | method | setting | val_acc | macro_f1 | balanced_acc | train | val | "
             "seconds |", "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in table.itertuples():
        setting = ", ".join(f"{k}={v}" for k, v in r.setting.items())
        lines.append(f"| {r.encoder} | {r.method} | {setting} | {r.val_acc:.4f} | "
                     f"{r.macro_f1:.4f} | {r.balanced_acc:.4f} | {r.train_rows} | "
                     f"{r.val_rows} | {r.seconds:.1f} |")
    best = result.best_outcome
    lines += ["", f"Per class, {best.encoder} {best.method}:", "",
              "| class | precision | recall | f1 | support |",
              "| --- | ---: | ---: | ---: | ---: |"]
    lines += [f"| {n} | {m['precision']:.4f} | {m['recall']:.4f} | {m['f1']:.4f} | "
              f"{m['support']} |" for n, m in best.per_class().items()]
    return "\n".join(lines) + "\n"


def _write_head(result: ProbeResult, store: Store, folder: str, key: str) -> str | None:
    """The best row's head (or, where it is no head, the best head's) as its weights and
    head.json (head.json last: a folder without it is no checkpoint)."""
    heads = [o for o in result.outcomes if o.has_head]
    if not heads:
        return None
    chosen: Outcome = max(heads, key=lambda o: o.scores[result.select])
    info = {"metrics": chosen.scores, "key": key,
            "probe": {"encoder": chosen.encoder, "method": chosen.method,
                      "setting": _plain(chosen.setting)}}
    if chosen.head_weights is not None:
        name, weights = HEAD_WEIGHTS, encode(chosen.head_weights)
        spec = chosen.head_spec.to_dict()
    else:
        source = Store(chosen.head_checkpoint, store.fsspec_options())
        name, weights = read(source)
        saved = json.loads(source.read_bytes(source.path(HEAD_CONFIG)))
        spec, info["run"] = saved["head"], chosen.head_checkpoint
    store.write_atomic(f"{folder}/{name}", weights)
    store.write_atomic(f"{folder}/{HEAD_CONFIG}",
                       json.dumps({"head": spec, **info}, indent=2, default=str).encode())
    return folder


def _plain(value: Any) -> Any:
    """JSON-ready: numpy numbers as Python ones, tuples as lists."""
    return json.loads(json.dumps(value, default=lambda v: v.item() if hasattr(v, "item")
                                 else list(v) if isinstance(v, tuple) else str(v)))

"""Read what a probe works on: each cache's key, label and embedding columns once (checked
against the manifest), split by the key hash training uses."""

from __future__ import annotations

import numpy as np

from raycache._fit.part import features, label_ids
from raycache._fit.split import validation_mask
from raycache._probe.data import Features
from raycache._probe.plan import Target

__all__ = ["read"]


def read(targets: list[Target], val_fraction: float) -> list[Features]:
    """Each target's training and validation rows, one read per cache."""
    out = []
    by_cache: dict[str, list[Target]] = {}
    for t in targets:
        by_cache.setdefault(t.cache.name, []).append(t)
    for group in by_cache.values():
        cache = group[0].cache
        key = cache.manifest.key_column
        labels = sorted({t.label for t in group})
        table = cache.read_table([key, *labels, *[t.column for t in group]])
        held = validation_mask(table.column(key), val_fraction).to_numpy(zero_copy_only=False)
        for t in group:
            x = np.array(features(table, (t.column,)), dtype=np.float32, copy=True)
            y = label_ids(table.column(t.label), t.spec.class_names)
            out.append(Features(t.name, cache, t.spec, x[~held], y[~held], x[held], y[held]))
    return out

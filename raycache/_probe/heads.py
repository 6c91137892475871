"""linear, mlp: heads trained by raycache's own sweep (every member on the same batches, one
run in this process or on DDP workers), its selected member scored on the probe's validation
rows. The mlp a probe adds by itself (methods left out) is one head with the default mlp's
settings but one width (HIDDEN) and at most ADDED_EPOCHS epochs, no sweep: it starts as the
solved linear head and comes near the sweep's best (bench/defaults.py), at the cost of one
short run."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from raycache._probe.data import Candidate, Features

if TYPE_CHECKING:
    from raycache._cache.committed import Cache
    from raycache._heads.loaded import Head
    from raycache._probe.config import ProbeConfig
    from raycache._probe.training import Training

__all__ = ["ADDED_EPOCHS", "SWEEPS", "fit_linear", "fit_mlp", "fit_sweep", "run_sweep",
           "train_config"]


SWEEPS = {"linear": {"head": ["linear"], "optim.lr": [1e-3, 3e-3, 1e-2, 3e-2]},
          "mlp": {"head": ["mlp"], "optim.lr": [1e-3, 3e-3], "hidden": [[256], [1024]]}}
"""The sweep each head method trains when it is named in `methods` and its `sweep:` is left
out."""
ADDED_EPOCHS = 15
"""loop.max_epochs of the mlp a probe adds by itself (methods left out), unless its `train:`
sets the loop: a bounded cost beside logreg, not a full default run (cap 50; its patience of
10 runs it past 15 epochs wherever its best comes after the 5th: bench/defaults.py's docs at
epoch 8, digits at 21)."""


def train_config(cfg: ProbeConfig, cache: str, fingerprint: str | None, column: str,
                 method: str | None = None, workers: int = 0) -> dict[str, Any]:
    """The TrainConfig (as a dict, without the store) that trains `method`'s heads on one
    encoder, with the probe's label and split, in this process or on `workers` DDP workers;
    no method: the one check() runs."""
    resources: dict[str, Any] = {"num_workers": workers}
    if workers:
        resources["cpus_per_worker"] = cfg.cpus_per_worker
    out: dict[str, Any] = {"cache": cache, "fingerprint": fingerprint, "encoders": [column],
                           "label": cfg.label, "progress": False,
                           "evaluation": {"val_fraction": cfg.val_fraction},
                           "resources": resources}
    if method is None:
        return out
    heads = getattr(cfg, method)
    extra = dict(heads.train)
    for key, value in extra.items():
        out[key] = ({**out[key], **value} if isinstance(out.get(key), dict)
                    and isinstance(value, dict) else value)
    grid = heads.sweep or (SWEEPS[method] if cfg.methods else {})
    if not grid:  # methods left out, so mlp was added: one head, the default mlp's settings
        out["head"] = method  # but fewer epochs at most (the user's loop settings win)
        from raycache._heads.specs import HIDDEN

        out.setdefault("hidden", list(HIDDEN))  # one width: hidden auto would train two
        loop = out.get("loop", {})
        out["loop"] = {"max_epochs": max(ADDED_EPOCHS, loop.get("min_epochs", 0)), **loop}
        return out
    out["sweep"] = dict(grid)
    out["select"] = "val_acc"  # what training measures; the probe scores the pick itself
    return out


def fit_sweep(data: Features, cfg: Any, training: Training, method: str) -> list[Candidate]:
    """One candidate: the sweep's selected member (its settings, validation predictions and
    checkpoint). The run is an ordinary run of the cache (`raycache runs` lists it), so
    probing again with the same settings returns it without training."""
    checkpoint, head, setting = run_sweep(data.cache, data.spec.encoders[0], cfg, training,
                                          method)
    pred = head.predict_ids(data.x_val) if len(data.x_val) else data.y_val[:0]
    return [Candidate(setting, pred, head.spec, checkpoint=checkpoint)]


def run_sweep(cache: Cache, column: str, cfg: Any, training: Training, method: str,
              workers: int = 0) -> tuple[str, Head, dict[str, Any]]:
    """Train `method`'s sweep on one encoder through `training` (in this process, or on
    `workers` DDP workers): (the checkpoint of its selected member, that head loaded, its
    settings and epochs)."""
    from raycache._heads.loaded import load_head

    m = cache.manifest
    tc = training.load_config(train_config(cfg, m.name, m.fingerprint, column, method, workers))
    tc = dataclasses.replace(tc, store=cfg.store, progress=False)
    run = training.train_on(tc, cache)  # the cache the probe opened, handed on
    head = load_head(run.checkpoint, **cache.store.fsspec_options())
    setting = dict(run.best.get("settings", {}))
    setting["epochs"] = len(run.history)
    return run.checkpoint, head, setting


def fit_linear(data: Features, cfg: Any, device: str, training: Training) -> list[Candidate]:
    return fit_sweep(data, cfg, training, "linear")


def fit_mlp(data: Features, cfg: Any, device: str, training: Training) -> list[Candidate]:
    return fit_sweep(data, cfg, training, "mlp")

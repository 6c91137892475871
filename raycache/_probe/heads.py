"""linear, mlp: heads trained by raycache's own sweep (every member on the same batches, one
run in this process), its selected member scored on the probe's validation rows."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from raycache._probe.data import Candidate, Features

if TYPE_CHECKING:
    from raycache._probe.config import ProbeConfig

__all__ = ["SWEEPS", "fit_linear", "fit_mlp", "fit_sweep", "train_config"]


SWEEPS = {"linear": {"head": ["linear"], "optim.lr": [1e-3, 3e-3, 1e-2, 3e-2]},
          "mlp": {"head": ["mlp"], "optim.lr": [1e-3, 3e-3], "hidden": [[256], [1024]]}}
"""The sweep each head method trains when its `sweep:` is left out."""


def train_config(cfg: ProbeConfig, cache: str, fingerprint: str | None, column: str,
                 method: str | None = None) -> dict[str, Any]:
    """The TrainConfig (as a dict, without the store) that trains `method`'s heads on one
    encoder, with the probe's label and split; no method: the one check() runs."""
    out: dict[str, Any] = {"cache": cache, "fingerprint": fingerprint, "encoders": [column],
                           "label": cfg.label, "progress": False,
                           "evaluation": {"val_fraction": cfg.val_fraction},
                           "resources": {"num_workers": 0}}
    if method is None:
        return out
    heads = getattr(cfg, method)
    extra = dict(heads.train)
    for key, value in extra.items():
        out[key] = ({**out[key], **value} if isinstance(out.get(key), dict)
                    and isinstance(value, dict) else value)
    out["sweep"] = dict(heads.sweep or SWEEPS[method])
    out["select"] = "val_acc"  # what training measures; the probe scores the pick itself
    return out


def fit_sweep(data: Features, cfg: Any, device: str, method: str) -> list[Candidate]:
    """One candidate: the sweep's selected member (its settings, validation predictions and
    checkpoint). The run is an ordinary run of the cache (`raycache runs` lists it), so
    probing again with the same settings returns it without training."""
    from raycache._heads.loaded import load_head
    from raycache._train.plan import load_config as load_train
    from raycache._train.run import train

    m = data.cache.manifest
    tc = load_train(train_config(cfg, m.name, m.fingerprint, data.spec.encoders[0], method))
    tc = dataclasses.replace(tc, store=cfg.store)
    run = train(tc, progress=False)
    head = load_head(run.checkpoint, **data.cache.store.fsspec_options())
    pred = head.predict_ids(data.x_val) if len(data.x_val) else data.y_val[:0]
    setting = dict(run.best.get("settings", {}))
    setting["epochs"] = len(run.history)
    return [Candidate(setting, pred, head.spec, checkpoint=run.checkpoint)]


def fit_linear(data: Features, cfg: Any, device: str) -> list[Candidate]:
    return fit_sweep(data, cfg, device, "linear")


def fit_mlp(data: Features, cfg: Any, device: str) -> list[Candidate]:
    return fit_sweep(data, cfg, device, "mlp")

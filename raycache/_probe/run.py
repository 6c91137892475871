"""PROBE: every chosen method on every encoder's features, the same key split for all; the
table, per-class metrics and the best row, and the report saved under the store."""

from __future__ import annotations

import time
from pathlib import Path

from raycache._cache.store import Store
from raycache._probe.config import ProbeConfig
from raycache._probe.data import Candidate, Features
from raycache._probe.metrics import confusion, scores
from raycache._probe.plan import load_config, targets
from raycache._probe.result import Outcome, ProbeResult, setting_text

__all__ = ["Outcome", "ProbeResult", "probe"]


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        from raycache._errors import ConfigError

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
    from raycache._probe import METHODS

    cfg = load_config(config)
    if progress is not None:
        cfg.progress = progress
    store = Store.from_config(cfg.store)
    store.check_reachable()
    found = targets(cfg, store)  # bad input fails here, before any read
    device = resolve_device(cfg.device)
    from raycache._probe.load import read

    outcomes = []
    for data in read(found, cfg.val_fraction):
        for method in cfg.methods:
            start = time.perf_counter()
            candidates = METHODS[method](data, cfg, device)
            out = score(data, method, candidates, cfg.select, time.perf_counter() - start)
            outcomes.append(out)
            if cfg.progress:
                print(f"probe {out.encoder} {method} {setting_text(out.setting)}: "
                      + ", ".join(f"{k} {v:.4f}" for k, v in out.scores.items())
                      + f" ({out.seconds:.1f} s)", flush=True)
    result = ProbeResult(cfg, outcomes, cfg.select)
    if cfg.report:
        from raycache._probe.report import write

        caches = list({t.cache.name: t.cache for t in found}.values())
        result.report, result.checkpoint = write(result, caches)
    return result

"""PROBE: every chosen method on every encoder's features, the same key split for all; the
table, per-class metrics and the best row, and the report saved under the store."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

from raycache._cache.store import Store
from raycache._core.steps import step
from raycache._probe.config import ProbeConfig
from raycache._probe.data import Candidate, Features, Shared
from raycache._probe.metrics import confusion, scores
from raycache._probe.plan import Target, load_config, targets
from raycache._probe.result import Outcome, ProbeResult, setting_text
from raycache._probe.training import Training
from raycache._probe.workers import resolve

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


def score(data: Features | Shared, method: str, candidates: list[Candidate], select: str,
          seconds: float) -> Outcome:
    """The candidate that `select` picks (the first of equals), with every setting's scores
    (from its confusion counts: the workers' summed, or those of its predictions here)."""
    k = data.spec.num_classes
    grid, best, best_conf = [], None, None
    for c in candidates:
        conf = c.confusion if c.confusion is not None else confusion(data.y_val, c.pred, k)
        s = scores(conf)
        grid.append({**c.setting, **s})
        if best is None or s[select] > scores(best_conf)[select]:
            best, best_conf = c, conf
    assert best is not None and best_conf is not None
    return Outcome(data.encoder, method, best.setting, scores(best_conf), best_conf,
                   data.classes, data.train_rows, data.val_rows, seconds, grid, best.spec,
                   best.weights, best.checkpoint)


def probe(config: ProbeConfig | dict | str | Path, training: Training, *,
          progress: bool | None = None) -> ProbeResult:
    """raycache.probe (raycache._pipeline.probe, which documents it), with `training` the
    front door that checks the train settings and trains linear and mlp."""
    cfg = load_config(config, training)
    if progress is not None:
        cfg.progress = progress
    store = Store.from_config(cfg.store)
    store.check_reachable()
    found = targets(cfg, store, training)  # bad input fails here, before any read
    device = resolve_device(cfg.device)
    workers, why = resolve(cfg, found)
    where = f"on Ray, {workers} workers" if workers else "in this process"
    if cfg.progress:
        print(f"probe {where}: {why}", flush=True)
    outcomes = []
    for data, method, candidates, seconds in (_on_ray(cfg, found, workers, training) if workers
                                              else _here(cfg, found, device, training)):
        out = score(data, method, candidates, cfg.select, seconds)
        outcomes.append(out)
        if cfg.progress:
            print(f"probe {out.encoder} {method} {setting_text(out.setting)}: "
                  + ", ".join(f"{k} {v:.4f}" for k, v in out.scores.items())
                  + f" ({out.seconds:.1f} s)", flush=True)
    outcomes += _lexical(cfg, found)
    result = ProbeResult(cfg, outcomes, cfg.select, where=f"{where}: {why}")
    if cfg.report:
        from raycache._probe.report import write

        caches = list({t.cache.name: t.cache for t in found}.values())
        result.report, result.checkpoint = write(result, caches)
    return result


def _lexical(cfg: ProbeConfig, found: list[Target]) -> list[Outcome]:
    """The lexical baseline's row for each cache with a text encoder (in this process), and a
    line for each cache left out (with progress)."""
    from raycache._probe import lexical

    with step(cfg.progress, "probe lexical: reading the source texts of the caches' rows"):
        rows, skipped = lexical.baselines(cfg, found)
    out = []
    for lex in rows:
        start = time.perf_counter()
        with step(cfg.progress, f"probe {lex.data.encoder} {lexical.METHOD}: TF-IDF + "
                                f"a linear SVM on {lex.data.train_rows:,} texts"):
            candidates = lexical.fit(lex, cfg)
        out.append(score(lex.data, lexical.METHOD, candidates, cfg.select,
                         time.perf_counter() - start))
    if cfg.progress:
        for o in out:
            print(f"probe {o.encoder} {o.method} {setting_text(o.setting)}: "
                  + ", ".join(f"{k} {v:.4f}" for k, v in o.scores.items())
                  + f" ({o.seconds:.1f} s)", flush=True)
        for why in skipped:
            print(f"probe: no lexical baseline: {why}", flush=True)
    return out


def _here(cfg: ProbeConfig, found: list[Target], device: str, training: Training
          ) -> Iterator[tuple[Features, str, list[Candidate], float]]:
    """Every method on every target's features, read into this process."""
    from raycache._probe import METHODS
    from raycache._probe.config import default_methods
    from raycache._probe.load import read

    with step(cfg.progress, f"probe: reading the features of {len(found)} encoder(s)"):
        features = read(found, cfg.val_fraction)
    for data in features:
        for method in cfg.methods or default_methods(data.train_rows, data.x_train.shape[1]):
            start = time.perf_counter()
            with step(cfg.progress, f"probe {data.encoder} {method}: {data.train_rows:,} "
                                    "training rows"):
                candidates = METHODS[method](data, cfg, device, training)
            yield data, method, candidates, time.perf_counter() - start


def _on_ray(cfg: ProbeConfig, found: list[Target], workers: int, training: Training
            ) -> Iterator[tuple[Shared, str, list[Candidate], float]]:
    from raycache._probe.on_ray import run

    steps, end = run(cfg, found, workers, training), object()
    while True:
        with step(cfg.progress, f"probe on Ray, {workers} workers: the next encoder and "
                                "method"):
            item = next(steps, end)
        if item is end:
            return
        yield item

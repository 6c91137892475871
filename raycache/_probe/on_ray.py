"""A probe on Ray: N workers each hold a part of every cache's rows (raycache._probe.worker);
logreg's L-BFGS sums their losses and gradients at each evaluation, knn merges their parts'
nearest neighbours, linear and mlp train on DDP workers, and every method's scores come from
the workers' confusion counts, summed here."""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Iterator
from typing import Any

from raycache._errors import ConfigError
from raycache._probe.config import ProbeConfig
from raycache._probe.data import Candidate, Shared
from raycache._probe.plan import Target
from raycache._probe.training import Training

__all__ = ["ON_RAY", "Workers", "run"]

HEAD_METHODS = ("linear", "mlp")


class Workers:
    """The probe's Ray actors, `count` of them with `cpus` CPUs each, and one cache's parts
    loaded into them at a time."""

    def __init__(self, count: int, cpus: float, progress: bool = True, training: bool = False):
        import ray

        from raycache._compute.cluster import connect
        from raycache._compute.pool import nodes
        from raycache._probe.worker import PartWorker

        connect(progress)
        check(count, cpus, nodes(), training)
        actor = ray.remote(PartWorker).options(num_cpus=cpus)
        self.actors = [actor.remote() for _ in range(count)]

    def load(self, cfg: ProbeConfig, group: list[Target]) -> list[Shared]:
        """Every worker reads its part of the group's cache (all the group's encoders in one
        read): one Shared per target."""
        import ray

        from raycache._fit.part import Reading

        first, world = group[0], len(self.actors)
        reading = Reading.of(first.cache, first.cache.store.for_workers())
        columns = tuple(t.column for t in group)
        counts = ray.get([a.load.remote(reading, first.cache.manifest.key_column, first.label,
                                        first.spec.class_names, columns, rank, world,
                                        cfg.val_fraction)
                          for rank, a in enumerate(self.actors)])
        train, val = (sum(c[i] for c in counts) for i in (0, 1))
        return [Shared(t.name, t.cache, t.spec, t.column, train, val, self) for t in group]

    def summed(self, method: str, *args: Any) -> Any:
        """Every worker's `method`(*args) results, summed (in rank order)."""
        import ray

        parts = ray.get([getattr(a, method).remote(*args) for a in self.actors])
        if isinstance(parts[0], tuple):  # several results: each summed
            return tuple(total([p[i] for p in parts]) for i in range(len(parts[0])))
        return total(parts)

    def close(self) -> None:
        import ray

        for a in self.actors:
            ray.kill(a)


def total(parts: list[Any]) -> Any:
    """parts[0] + parts[1] + ..., in that order (the same sum every run)."""
    out = parts[0]
    for p in parts[1:]:
        out = out + p
    return out


def check(count: int, cpus: float, nodes: list[dict[str, float]], training: bool) -> None:
    """A ConfigError where the cluster cannot hold `count` workers of `cpus` CPUs (twice that
    when linear or mlp train DDP workers beside them): never a wait without end."""
    need = count * (2 if training else 1)
    fits = sum(math.floor(n.get("CPU", 0.0) / cpus + 1e-9) for n in nodes)
    if need <= fits:
        return
    what = f"{count} probe workers" + (f" and {count} DDP workers (linear, mlp)" if training
                                       else "")
    raise ConfigError([f"num_workers={count}: {what} of cpus_per_worker={cpus:g} CPU each; the "
                       f"Ray cluster has {sum(n.get('CPU', 0.0) for n in nodes):g} CPUs on "
                       f"{len(nodes)} node(s), which hold {fits} such workers. Lower "
                       "num_workers or cpus_per_worker, or set num_workers: 0 to probe in this "
                       "process"])


def logreg(data: Shared, cfg: ProbeConfig, training: Training | None = None) -> list[Candidate]:
    """Every C solved together by the batched L-BFGS here, each evaluation the sum of the
    workers' data terms (their parts' rows, standardised by every part's moments) and one
    L2 penalty: the in-process objective; the solution mapped back to the raw features
    (`training`: unused, the ON_RAY shape)."""
    import ray
    import torch

    from raycache._fit.lbfgs import minimize
    from raycache._fit.logreg import penalty, standardizer, to_raw

    settings, k, d = cfg.logreg, data.spec.num_classes, data.spec.in_dim
    cs, n = list(settings.C), data.train_rows
    scale = standardizer(data.workers.summed("logreg_sums", data.column))

    def f(params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ref = ray.put(params)
        loss, grad = data.workers.summed("logreg_term", data.column, ref, k, len(cs), n, scale)
        more, more_grad = penalty(params, d, k, cs, n)
        return loss + more, grad + more_grad

    start = torch.zeros(len(cs), d * k + k)
    out = minimize(f, start, settings.max_iter, settings.tol, ftol=0.0)
    w, b = to_raw(out.params[:, : d * k].view(len(cs), d, k), out.params[:, d * k:], *scale)
    confs = data.workers.summed("logreg_confusion", data.column, w, b)
    spec = dataclasses.replace(data.spec, head="linear", hidden=(), dropout=0.0)
    return [Candidate({"C": c, "iterations": int(out.iterations[i])}, None, spec,
                      {"1.weight": w[i].T.contiguous(), "1.bias": b[i].clone()},
                      confusion=confs[i]) for i, c in enumerate(cs)]


def knn(data: Shared, cfg: ProbeConfig, training: Training | None = None) -> list[Candidate]:
    """Every worker searches its part of the training rows for every worker's validation
    rows (object refs, never through here); each worker merges its own rows' neighbours from
    all parts, votes and counts; the counts are summed (`training`: unused, the ON_RAY
    shape)."""
    import ray

    s, actors = cfg.knn, data.workers.actors
    world, kmax = len(actors), max(s.k)
    queries = [a.val_rows.remote(data.column) for a in actors]
    tops = [a.knn_top.options(num_returns=world).remote(data.column, queries, kmax, s.metric,
                                                       s.block_rows) for a in actors]
    tops = [t if isinstance(t, list) else [t] for t in tops]  # num_returns=1: one ref
    confs = ray.get([a.knn_confusion.remote(data.column, [tops[w][r] for w in range(world)],
                                            list(s.k), data.spec.num_classes, s.temperature)
                     for r, a in enumerate(actors)])
    summed = total(confs)
    return [Candidate({"k": k, "metric": s.metric, "T": s.temperature}, None,
                      confusion=summed[i]) for i, k in enumerate(s.k)]


def heads(data: Shared, cfg: ProbeConfig, training: Training, method: str) -> list[Candidate]:
    """`method`'s sweep trained through `training` on as many DDP workers as hold parts; its
    selected head scored by the workers on their validation rows."""
    from raycache._probe.heads import run_sweep

    workers = data.workers
    checkpoint, head, setting = run_sweep(data.cache, data.column, cfg, training, method,
                                          len(workers.actors))
    conf = workers.summed("head_confusion", data.column, checkpoint,
                          data.cache.store.for_workers(), data.spec.num_classes)
    return [Candidate(setting, None, head.spec, checkpoint=checkpoint, confusion=conf)]


ON_RAY = {
    "logreg": logreg,
    "knn": knn,
    "linear": functools.partial(heads, method="linear"),
    "mlp": functools.partial(heads, method="mlp"),
}
"""Each METHODS entry's Ray form: (Shared, ProbeConfig, Training) -> Candidates."""


def own_errors(fn: Any, *args: Any) -> Any:
    """fn(*args), a worker's raycache error (a CorruptShard, say) raised as its own type rather
    than Ray's wrapper of it."""
    from raycache._compute.cluster import unwrap

    try:
        return fn(*args)
    except Exception as exc:
        error = unwrap(exc)
        if error is exc:
            raise
        raise error from exc


def run(cfg: ProbeConfig, found: list[Target], workers: int, training: Training
        ) -> Iterator[tuple[Shared, str, list[Candidate], float]]:
    """(encoder's parts, method, candidates, seconds) for every method on every target, one
    cache's parts held by the workers at a time (methods left out: DEFAULT_METHODS; the
    rows of a probe on Ray are past an mlp's MLP_AUTO_SIZE)."""
    from raycache._probe.config import DEFAULT_METHODS

    methods = cfg.methods or list(DEFAULT_METHODS)
    group = Workers(workers, cfg.cpus_per_worker, cfg.progress,
                    training=any(m in HEAD_METHODS for m in methods))
    by_cache: dict[str, list[Target]] = {}
    for t in found:
        by_cache.setdefault(t.cache.name, []).append(t)
    try:
        for targets in by_cache.values():
            for data in own_errors(group.load, cfg, targets):
                for method in methods:
                    start = time.perf_counter()
                    candidates = own_errors(ON_RAY[method], data, cfg, training)
                    yield data, method, candidates, time.perf_counter() - start
    finally:
        group.close()

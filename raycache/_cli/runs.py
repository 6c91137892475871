"""`raycache runs`: a cache's training runs, across its versions (or of one), with the served
head's metric, sorted as asked; a table, or JSON."""

from __future__ import annotations

import argparse

from raycache._cli.command import Command
from raycache._cli.scripting import OK, add_json, print_json
from raycache._cli.store import cache_options, checked_store
from raycache._errors import RaycacheError

__all__ = ["COMMANDS", "SORTS"]

SORTS = ("updated", "started", "name", "metric")
"""What `raycache runs --sort` orders by (metric: the served head's, best first)."""


def runs_options(p: argparse.ArgumentParser) -> None:
    add_json(cache_options(p))
    p.add_argument("--sort", choices=SORTS,
                   help="order by: updated (default, oldest first), started, name, or metric "
                        "(the served head's, best first; the default with --metric)")
    p.add_argument("--metric", help="the metric shown, sorted by (--sort metric) and headlined, "
                                    "of the served epoch (default: each run's monitored "
                                    "metric); one no run recorded is refused")


def runs(args: argparse.Namespace) -> int:
    from raycache._cache.finding import ls, open_cache
    from raycache._cli.tables import print_table
    from raycache._train.console import number
    from raycache._train.folder.record import list_runs

    name, _, fp = args.cache.partition("/")
    store = checked_store(args.store)
    versions = [open_cache(name, store, fp)] if fp else ls(store, name) or [
        open_cache(name, store)]  # none: open_cache names what is missing
    found = [(v, r) for v in versions for r in list_runs(v)]
    if args.metric:
        check_metric(args.metric, [r for _, r in found])
    found = ranked(found, args.sort or ("metric" if args.metric else "updated"), args.metric)
    if args.json:
        print_json([{**vars(r), "metric": args.metric or r.monitor or "val_loss",
                     "served_metric": served(r, args.metric),
                     "served_epoch": r.served.get("epoch")} for _, r in found])
        return OK
    if not found:
        where = ", ".join(f"{v.name}/{v.fingerprint[:12]}" for v in versions)
        print(f"no training runs of {where} in {args.store}")
        return OK
    metrics = {args.metric or r.monitor or "val_loss" for _, r in found}
    metric = metrics.pop() if len(metrics) == 1 else "metric"
    columns = ["version", "run", "status", "epochs", "head", f"served {metric}", "epoch",
               "best", "updated", "checkpoint"]
    print_table(columns, [
        [v.fingerprint[:12], r.name, r.status, f"{r.epochs_done}/{r.epochs}",
         f"{r.objective or '-'}/{r.head or '-'}",
         number(served(r, args.metric)) + ("" if metric != "metric" else
                                           f" {args.metric or r.monitor or 'val_loss'}"),
         r.served.get("epoch", "-"), number(r.best.get(args.metric or r.monitor or "val_loss")),
         r.updated[:16].replace("T", " "), r.checkpoint or "-"]
        for v, r in found], plain=[r.line(args.metric) for _, r in found])
    return OK


def check_metric(metric: str, runs: list) -> None:
    """Refuse a --metric that no run recorded, naming the metrics they have."""
    have = sorted({k for r in runs for m in (r.served, r.metrics) for k, v in m.items()
                   if isinstance(v, int | float) and not isinstance(v, bool) and k != "epoch"})
    if runs and metric not in have:  # named: the scores, not the counts and timings
        scores = [k for k in have if k.startswith(("val_", "train_")) and not
                  k.endswith("_rows")] or have
        raise RaycacheError(f"--metric {metric!r}: no run recorded it; the runs' metrics are "
                            f"{', '.join(scores) or '(none)'}: pass one of them")


def served(run, metric: str | None = None) -> float | None:
    """The served head's value of `metric` (default: the run's monitored one)."""
    return run.served.get(metric or run.monitor or "val_loss")


def ranked(found: list, sort: str, metric: str | None) -> list:
    """(version, run) pairs in the order --sort asks: metric best first (lowest for a loss),
    runs without it last."""
    if sort != "metric":
        return sorted(found, key=lambda vr: str(getattr(vr[1], sort)))
    def key(vr):
        value = served(vr[1], metric)
        lower = (metric or vr[1].monitor or "val_loss").endswith("loss")
        return (value is None, 0.0 if value is None else value if lower else -value)
    return sorted(found, key=key)


COMMANDS = (Command("runs", "list a cache's training runs, across its versions (NAME/FINGERPRINT: "
                            "of that one): status, epochs, objective, head, the served head's "
                            "metric and the checkpoint predict takes", runs_options, runs),)

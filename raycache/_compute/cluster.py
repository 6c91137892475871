"""Connecting to Ray (in-process, or the cluster a job runs on), sizing pools there, checks."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable

import ray
import ray.data
from ray._private import ray_constants

from raycache import _errors as errors
from raycache._cache.store import Store
from raycache._compute.pool import Pool, gpus_for, nodes, request, size_pool
from raycache._compute.pool_config import PoolConfig
from raycache._compute.where import check_store, ray_address
from raycache._errors import ConfigError, RaycacheError

__all__ = ["check_store_for_cluster", "cluster_pool", "connect", "unwrap"]

EVENTS = "RAY_SCHEDULER_EVENTS"
_ERROR_LINE = re.compile(r"raycache\._errors\.(\w+): (.*)", re.S)


def connect(progress: bool = True, verbose: bool = False) -> None:
    """Join the cluster in RAY_ADDRESS (as under `ray job submit`), or start a Ray of this
    process's own (`where.ray_address`: never a cluster found running on the machine); a Ray
    already started in this process is used as it is.
    Ray's and Ray Data's own logs and progress bars, and the autoscaler's events, show only when
    `verbose`; workers' output reaches the driver only with `progress` (errors always raise
    here)."""
    # Ray's switch for the "(autoscaler +Ns) ..." lines, RAY_SCHEDULER_EVENTS, is read when Ray
    # is imported; the driver checks this copy of it for every batch of those lines
    ray_constants.AUTOSCALER_EVENTS = int(verbose and os.environ.get(EVENTS, "1") != "0")
    if not ray.is_initialized():
        ray.init(address=ray_address(), logging_level=logging.INFO if verbose else logging.ERROR,
                 log_to_driver=progress or verbose)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = verbose
    ctx.print_on_execution_start = verbose
    logging.getLogger("ray.data").setLevel(logging.INFO if verbose else logging.ERROR)


def cluster_pool(cfg: PoolConfig, blocks: int | None | Callable[[float], int | None], *,
                 autoscaling: bool, progress: bool, verbose: bool,
                 store: Store | None = None) -> Pool:
    """Connect, check that the cluster sees `store`, size the pool for `cfg` on the cluster's
    nodes for `blocks` model calls (or `blocks(gpus per actor)` where the block size depends on
    them), and ask an autoscaling cluster for it."""
    connect(progress, verbose)
    if store is not None:
        check_store_for_cluster(store)
    cluster = nodes()
    if callable(blocks):
        blocks = blocks(gpus_for(cfg, cluster))
    pool = size_pool(cfg, cluster, blocks, autoscaling=autoscaling)
    if autoscaling:
        from ray.autoscaler.sdk import request_resources

        request_resources(**request(pool))
    return pool


def unwrap(exc: BaseException) -> BaseException:
    """The raycache error inside an error that Ray raised for a task or actor, as its own type
    (so callers catch EncoderError, not Ray's wrapper); `exc` itself when there is none."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    wrapped = None
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if type(e).__module__ == "raycache._errors":
            return ConfigError(e.problems) if isinstance(e, ConfigError) else type(e)(*e.args)
        if isinstance(e, RaycacheError) and wrapped is None:
            wrapped = e  # Ray's subclass of the user's error type; its message holds a traceback
        todo += [getattr(e, "cause", None), e.__cause__, e.__context__]
    if wrapped is not None:
        base = next(t for t in type(wrapped).__mro__ if t.__module__ == "raycache._errors")
        return base(str(wrapped))
    # Ray Data passes a stage's error on as text only: its traceback ends with the error line
    text = str(exc)
    found = _ERROR_LINE.match(text, max(text.rfind("raycache._errors."), 0))
    if found:
        kind, message = found.group(1), found.group(2).strip()
        cls = getattr(errors, kind, None)
        if isinstance(cls, type) and issubclass(cls, RaycacheError) and cls is not ConfigError:
            return cls(message)
    return exc


def check_store_for_cluster(store: Store) -> None:
    """A local folder is only seen by every node when it is a shared mount."""
    check_store(store, sum(1 for n in ray.nodes() if n.get("Alive")))

"""Connecting to Ray: the in-process default or the cluster a job runs on, and store checks."""

from __future__ import annotations

import logging

import ray

from raycache.errors import StoreError
from raycache.store import Store


def connect(progress: bool = True) -> None:
    """Join the cluster in RAY_ADDRESS (as under `ray job submit`), or start Ray in-process.
    Without progress, workers' logs stay in Ray's log files (errors still raise here)."""
    if not ray.is_initialized():
        ray.init(logging_level=logging.WARNING, log_to_driver=progress)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = progress
    ctx.print_on_execution_start = progress


def check_store_for_cluster(store: Store) -> None:
    """A local folder is only seen by every node when it is a shared mount."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if store.is_local and not store.shared and len(nodes) > 1:
        raise StoreError(
            f"store {store.uri!r} is a local folder, but this Ray cluster has {len(nodes)} nodes "
            "that do not see each other's disks; use object storage (s3://bucket/prefix or any "
            "fsspec URI), or set store.shared: true if the folder is a mount every node shares"
        )

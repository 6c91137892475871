"""Where a job runs, decided from what is there: this process, or the Ray cluster this process
is connected to or RAY_ADDRESS names (looked up in its GCS, without joining it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from raycache._core.config import AUTO
from raycache._errors import StoreError

if TYPE_CHECKING:
    from raycache._cache.store import Store

__all__ = ["AUTO_IN_PROCESS_ROWS", "LOCAL_CORES", "Cluster", "check_store", "in_process", "look",
           "ray_address"]

AUTO_IN_PROCESS_ROWS = 20_000
"""On a cluster of several nodes, in_process: auto still runs a CPU job of at most this many
rows here: an actor pool's start-up (3-5 s to the first encoder call) costs more than they do."""
LOCAL_CORES = 16
"""On one machine of at most this many cores, a CPU fill runs in-process whatever its size: one
process's torch threads use them as well as actors do, with no start-up. On more, a job over
AUTO_IN_PROCESS_ROWS starts Ray: actors of a few threads each scale past one process's
intra-op threads and its one Python thread that reads, prepares and writes."""


@dataclass(frozen=True)
class Cluster:
    """The Ray cluster a job would run on: its alive nodes' resources."""

    nodes: tuple[dict[str, float], ...]
    address: str

    @property
    def cpus(self) -> float:
        return sum(n.get("CPU", 0.0) for n in self.nodes)

    @property
    def gpus(self) -> float:
        return sum(n.get("GPU", 0.0) for n in self.nodes)

    def describe(self) -> str:
        many = "one node" if len(self.nodes) == 1 else f"{len(self.nodes)} nodes"
        gpus = f", {self.gpus:g} GPUs" if self.gpus else ""
        return f"a Ray cluster of {many} ({self.cpus:g} CPUs{gpus})"


def ray_address() -> str:
    """The address a job that starts Ray gives `ray.init`: RAY_ADDRESS where it is set (as
    `ray job submit` sets it; "auto" joins the cluster on this machine), else "local": a Ray of
    the job's own, never a cluster that `ray start` left running here (which `ray.init()`
    joins: its size unknown to `look`, maybe no CPUs, and handed the store's credentials)."""
    return os.environ.get("RAY_ADDRESS") or "local"


def look(apart: bool = False) -> Cluster | None:
    """The cluster this process is connected to, or the one RAY_ADDRESS names (asked through
    its GCS in milliseconds: joining takes a second or more; `apart`: from a child process, so
    that importing Ray's client takes neither this process's GIL nor its memory); None where
    there is none. A cluster that cannot be asked (a Ray Client address, an unreachable head)
    reads as one of unknown size: (no nodes) decisions then leave the job to Ray, as they
    always did."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        alive = tuple(dict(n["Resources"]) for n in ray.nodes() if n.get("Alive"))
        return Cluster(alive, "connected")
    address = os.environ.get("RAY_ADDRESS", "")
    if not address:
        return None
    return Cluster(_gcs_nodes(address, apart), address)


def look_ahead(ray_likely: bool = False) -> Callable[[], Cluster | None]:
    """look(), started now on a thread where it is slow (RAY_ADDRESS named, this process not
    connected), so that it runs beside a fill's plan; call what it returns for the answer, the
    same each time. The GCS is asked from a child process (the plan's row hashing holds this
    one's GIL); Ray itself is imported on the thread only where the job will likely join the
    cluster (`ray_likely`, or a cluster that auto sends large jobs to)."""
    ray = sys.modules.get("ray")
    if not os.environ.get("RAY_ADDRESS") or (ray is not None and ray.is_initialized()):
        return look
    pool = ThreadPoolExecutor(1, thread_name_prefix="raycache-where")
    answer = pool.submit(_ahead, ray_likely)
    pool.shutdown(wait=False)
    return answer.result


def _ahead(ray_likely: bool) -> Cluster | None:
    found = look(apart=True)
    nodes = found.nodes if found else ()
    if ray_likely or len(nodes) != 1 or nodes[0].get("GPU") or found.cpus > LOCAL_CORES:
        import ray  # noqa: F401 (the job will join it: imported here, beside the plan)
    return found


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


_ASK_GCS = ("import json, sys\n"
            "from ray._raylet import GcsClient\n"
            "info = GcsClient(address=sys.argv[1]).get_all_node_info(timeout=5)\n"
            "print(json.dumps([dict(n.resources_total) for n in info.values()"
            " if n.state == 0]))\n")  # 0: ALIVE


def _gcs_nodes(address: str, apart: bool = False) -> tuple[dict[str, float], ...]:
    if "://" in address or address == "auto":
        return ()
    try:
        if apart:
            done = subprocess.run([sys.executable, "-c", _ASK_GCS, address], timeout=30,
                                  capture_output=True, text=True, check=True)
            return tuple(json.loads(done.stdout.strip().splitlines()[-1]))
        from ray._raylet import GcsClient

        info = GcsClient(address=address).get_all_node_info(timeout=5)
    except Exception:  # noqa: BLE001 (any failure: leave the choice to Ray, as before)
        return ()
    return tuple(dict(n.resources_total) for n in info.values() if n.state == 0)  # ALIVE


def in_process(setting: bool | str, *, cpu: bool | None, concurrency: int | str,
               rows: int | None, cores: int | None = None,
               ask: Callable[[], Cluster | None] | None = None) -> tuple[bool, str]:
    """Whether a job runs its stages in this process, and why, in words. `setting` unless auto;
    auto runs a CPU job with no actor pool asked for here when:
    - no cluster is running here or named, on a machine of at most LOCAL_CORES cores (more: up
      to AUTO_IN_PROCESS_ROWS rows);
    - the cluster is one node (of at most LOCAL_CORES cores): actors would share its cores,
      after seconds of start-up;
    - the job has at most AUTO_IN_PROCESS_ROWS rows (an incremental fill's few changed rows).
    GPU jobs keep their actors: one model per GPU (`cpu` None: a GPU job where the cluster
    has GPUs). `ask`: how the cluster is looked at (look, or look_ahead's answer)."""
    if setting != AUTO:
        return bool(setting), f"in_process: {str(bool(setting)).lower()}"
    if cpu is False:
        return False, "GPU actors"
    if concurrency != AUTO:
        return False, f"concurrency: {concurrency}"
    cores = cores or os.cpu_count() or 1
    small = rows is not None and rows <= AUTO_IN_PROCESS_ROWS
    cluster = (ask or look)()
    if cpu is None and (_cuda() if cluster is None else cluster.gpus or not cluster.nodes):
        return False, "GPU actors" if cluster is None or cluster.gpus else "a Ray cluster"
    if cluster is None:
        if cores <= LOCAL_CORES or small:
            return True, f"no Ray cluster; {cores} CPUs here"
        return False, f"no Ray cluster, {cores} CPUs here: actors of a few threads scale further"
    if len(cluster.nodes) == 1 and (cluster.cpus <= LOCAL_CORES or small):
        return True, f"{cluster.describe()}: actors would share its cores"
    if small:
        return True, f"{rows:,} rows: fewer than an actor pool's start-up is worth"
    return False, f"{cluster.describe() if cluster.nodes else 'a Ray cluster'}"


def check_store(store: Store, nodes: int) -> None:
    """A local folder is only seen by every node of a cluster of `nodes` when it is a shared
    mount: refused otherwise (an in-process fill too, whose cache the cluster's training could
    not read)."""
    if store.is_local and not store.shared and nodes > 1:
        raise StoreError(
            f"store {store.uri!r} is a local folder, but this Ray cluster has {nodes} nodes "
            "that do not see each other's disks; use object storage (s3://bucket/prefix or any "
            "fsspec URI), or set store.shared: true if the folder is a mount every node shares"
        )

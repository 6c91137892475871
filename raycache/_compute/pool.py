"""Sizing the fill's encoder pool from the cluster, and refusing pools the cluster cannot hold."""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Any

from raycache._compute.pool_config import PoolConfig
from raycache._core.config import AUTO
from raycache._encoders.batching import Batching
from raycache._errors import ConfigError

__all__ = ["CORES", "LIGHT_CPUS", "READ_CPUS", "WRITERS_PER_ACTOR", "Pool", "cores", "gpus_for",
           "local_pool", "nodes", "request", "size_pool"]

GPU_ON_CPU = "RAYCACHE_TEST_GPU_ON_CPU"
"""Test-only switch: with it set (on a cluster that advertises logical GPUs, ray.init(num_gpus=
...)), GPU-shaped actors are scheduled and sized as on GPUs but run their models on the CPU, so
every GPU branch that does not need CUDA itself runs in CI. Never set it in production."""
LIGHT_CPUS = 0.1
"""Logical CPUs of each prepare and write task on CPU fills: light work next to encoding."""
READ_CPUS = 1.0
"""Logical CPUs of each read task: Ray Data's default, so the re-blocking into blocks fuses
into the read (it fuses only with stages of equal resources)."""
WRITERS_PER_ACTOR = 2
"""Writes a model actor of a GPU pool has going beside its model: their logical CPUs are left
free for its writing thread (the write actors of model_actor's "apart" shape, a bench's)."""
RESERVE = 1.25
"""Logical CPUs per node that the encoder actors leave for reading, preparing and writing."""
CORES = "raycache_cores"
"""The key under which `nodes` gives a node's real cores, where it knows them (this machine's)."""
MAX_CPU_THREADS = 4
"""Torch threads per CPU actor under num_cpus: auto (a quarter of a node's CPUs, 1 to 4); a node
gets several such actors."""


@dataclass(frozen=True)
class Pool:
    """The encoder pool of one fill (actors on GPUs, tasks on CPUs), and what each asks of
    Ray."""

    actors: int
    cpus: float
    """Logical CPUs per actor."""
    gpus: float
    threads: int
    """Torch threads per actor."""
    batching: Batching
    prepare_cpus: float
    """Logical CPUs of each prepare (tokenise) actor: a whole CPU where GPUs wait on it."""
    prepare_actors: int
    """Prepare (tokenising) actors: one on CPU fills, where tokenising is ~1% of the work and
    runs inside each encoder task; on GPU pools, one per CPU that the encoders, the reads and
    the writers leave (at most one a core beside the model actors), all started with the pool
    (a GPU encodes short texts faster than ten cores tokenise them)."""
    writers: int = 1
    """Writes of a GPU pool at once, each LIGHT_CPUS left free for them: in the model actors'
    threads (write actors only in model_actor's "apart" shape, a bench's before)."""

    @property
    def tasks(self) -> bool:
        """Whether the model runs as Ray Data tasks, not actors: on CPUs, where a task starts
        in a worker process that Ray keeps (the model kept there between blocks, see
        _compute.memo) and an actor pool costs seconds before its first call; GPU pools keep
        their actors, one model held on each GPU's fraction."""
        return not self.gpus

    @property
    def device(self) -> str:
        """Where the pool's models run: CUDA where it holds GPUs (the CPU under GPU_ON_CPU)."""
        return "cuda" if self.gpus > 0 and not os.environ.get(GPU_ON_CPU) else "cpu"

    def describe(self) -> str:
        if self.tasks:
            return (f"{self.actors} encoder task(s) at a time, {self.cpus:g} CPU and "
                    f"{self.threads} thread(s) each")
        where = f"{self.gpus:g} GPU + {self.cpus:g} CPU"
        return f"{self.actors} encoder actor(s), {where} and {self.threads} thread(s) each"


def nodes() -> list[dict[str, float]]:
    """The resources of each alive node of the connected Ray cluster; a node on this machine
    also gives the cores that exist here (CORES), which its logical CPUs may exceed."""
    import ray

    here = ray.util.get_node_ip_address()
    return [{**n["Resources"], **({CORES: float(cores())} if n.get("NodeManagerAddress") == here
                                  else {})}
            for n in ray.nodes() if n.get("Alive")]


def cores() -> int:
    """The cores this process may run on (its affinity; all of os.cpu_count where unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _usable(node: dict[str, float]) -> float:
    """A node's CPUs that do work at once: its logical CPUs, at most the cores it has (where
    known: a Ray told of 16 CPUs on 2 cores runs 2 things at a time)."""
    return min(node.get("CPU", 0.0), node.get(CORES, float("inf")))


def size_pool(cfg: PoolConfig, cluster: list[dict[str, float]], blocks: int | None = None,
              *, autoscaling: bool = False) -> Pool:
    """The pool for `cfg` on a cluster of `cluster` nodes, for `blocks` encoder calls of work
    (auto never starts more actors than that); a ConfigError naming the value, what the
    cluster has and the fix when it cannot be scheduled (unless `autoscaling`). num_gpus auto
    is one GPU per actor where a node has GPUs, else CPU actors."""
    gpus = gpus_for(cfg, cluster)
    node_cpus = [n.get("CPU", 0.0) for n in cluster] or [0.0]
    usable = [_usable(n) for n in cluster] or [0.0]
    node_gpus = [n.get("GPU", 0.0) for n in cluster] or [0.0]
    has = f"the cluster has {sum(node_cpus):g} CPUs and {sum(node_gpus):g} GPUs on " \
          f"{len(cluster)} node(s)"
    problems: list[str] = []
    if sum(node_cpus) <= 0 and not autoscaling:  # nothing runs there (a stray `ray start`)
        raise ConfigError([f"the Ray cluster has no CPUs: {has}, so no task can run there; "
                           "start its nodes with CPUs (`ray start --num-cpus N`), join "
                           "another cluster (RAY_ADDRESS), unset RAY_ADDRESS to start Ray "
                           "here, or set autoscaling: true where nodes start on demand"])
    if gpus > 0:
        cpus = 1.0 if cfg.num_cpus == AUTO else float(cfg.num_cpus)
        per_node = [min(_fit(g, gpus), _fit(c - RESERVE, cpus))
                    for c, g in zip(node_cpus, node_gpus, strict=True)]
        if sum(node_gpus) == 0 and not autoscaling:
            problems.append(
                f"pool.num_gpus={gpus:g}: {has}; set pool.num_gpus: 0 to encode on CPUs, connect "
                "to a cluster with GPUs, or set autoscaling: true where GPU nodes start on demand")
        elif max(node_gpus) < min(gpus, 1) and not autoscaling:
            problems.append(f"pool.num_gpus={gpus:g}: no node has that many GPUs; {has}")
    else:
        if cfg.num_cpus == AUTO:  # a few threads per actor; logical CPUs share what is left
            # one thread per actor on small nodes: an actor also prepares and writes its
            # blocks (single-threaded work), which another actor's model overlaps
            threads = max(1, min(MAX_CPU_THREADS, int(max(usable)) // 4))
            per_node = [max(1, int(u) // threads) if c >= 1 else 0
                        for c, u in zip(node_cpus, usable, strict=True)]
            cpus = max(LIGHT_CPUS, min(((c - RESERVE) / k for c, k in zip(
                node_cpus, per_node, strict=True) if k), default=1.0))
        else:
            cpus = float(cfg.num_cpus)
            threads = max(1, round(cpus))
            per_node = [_fit(c - RESERVE, cpus) for c in node_cpus]
    fits = sum(per_node)
    actors = (max(1, min(fits, blocks or fits)) if cfg.concurrency == AUTO
              else int(cfg.concurrency))
    if not autoscaling and not problems and actors > fits:
        problems.append(
            f"pool.concurrency={cfg.concurrency} actors x {cpus:g} CPU"
            + (f" + {gpus:g} GPU" if gpus else "")
            + f" each: {has}, which hold {fits} such actor(s) with {RESERVE:g} CPU per node "
            "left for reading, tokenising and writing. Lower pool.concurrency or pool.num_cpus"
            + (" or pool.num_gpus" if gpus else "") + ", or leave them at auto")
    if problems:
        raise ConfigError(problems)
    if gpus > 0:
        threads = max(1, round(cpus))
    on_gpu = gpus > 0
    auto = Batching.on(on_gpu)
    batching = Batching(
        max_rows=auto.max_rows if cfg.batch_size == AUTO else int(cfg.batch_size),
        token_budget=auto.token_budget if cfg.token_budget == AUTO else int(cfg.token_budget),
    )
    if not on_gpu:
        return Pool(actors, cpus, gpus, threads, batching, LIGHT_CPUS, 1)
    # What the encoders and a read task leave (>= the reserve's 0.25 a node): writers first,
    # fewer where they would leave no whole CPU to tokenise; then one tokenising actor a CPU,
    # or one on the fraction left (every actor of the pipeline is started, so all must fit)
    left = sum(node_cpus) - actors * cpus - READ_CPUS
    writers = max(1, min(WRITERS_PER_ACTOR * actors, int((left - 1.0) / LIGHT_CPUS + 1e-9)))
    spare = left - writers * LIGHT_CPUS
    if spare >= 1.0:  # a tokeniser a core beside the model actors' feeding, at most
        room = max(1, math.floor(sum(usable)) - actors)
        return Pool(actors, cpus, gpus, threads, batching, 1.0, min(_fit(spare, 1.0), room),
                    writers)
    return Pool(actors, cpus, gpus, threads, batching, math.floor(spare * 100) / 100, 1, writers)


def local_pool(cfg: PoolConfig) -> Pool:
    """The pool of a job run in this process: one model with a torch thread per core here (or
    num_cpus), its batches sized as on a CPU actor."""
    here = cores()
    pool = size_pool(cfg, [{"CPU": float(here)}], 1)
    threads = here if cfg.num_cpus == AUTO else max(1, round(float(cfg.num_cpus)))
    return dataclasses.replace(pool, cpus=float(threads), threads=threads)


def gpus_for(cfg: PoolConfig, cluster: list[dict[str, float]]) -> float:
    """GPUs per actor: cfg.num_gpus, or where it is auto, 1 when a node of `cluster` has a GPU
    and 0 (CPU actors) when none has."""
    if cfg.num_gpus == AUTO:
        return float(any(n.get("GPU", 0.0) > 0 for n in cluster))
    return float(cfg.num_gpus)


def _fit(have: float, each: float) -> int:
    """How many `each` fit in `have` (with a little slack for float sums)."""
    return max(0, math.floor(have / each + 1e-9)) if each > 0 else 0


def request(pool: Pool) -> dict[str, Any]:
    """The bundles an autoscaling cluster is asked for, one per actor."""
    bundle = {"CPU": pool.cpus, **({"GPU": pool.gpus} if pool.gpus else {})}
    return {"bundles": [bundle] * pool.actors}

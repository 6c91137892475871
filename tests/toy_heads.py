"""Heads for tests, importable by Ray Train workers ("toy_heads:slow_linear")."""

import time

import torch

DELAY_S = 0.02
"""Seconds each forward pass sleeps: slow enough to kill a process between two checkpoints."""


class Sleep(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(DELAY_S)
        return x


def slow_linear(in_dim: int, out_dim: int, hidden: list[int], dropout: float) -> torch.nn.Module:
    """A linear head whose every forward pass takes DELAY_S longer."""
    return torch.nn.Sequential(torch.nn.Linear(in_dim, out_dim), Sleep())


WATCH: str = ""
"""A store folder: recording_linear notes whether a manifest was in it at its first training
step (in FIRST_STEP) and then sets toy_encoders.GATE. In a DDP worker (no WATCH there) it tells
the FirstStep actor named SIGNAL instead, which holds the folder."""
FIRST_STEP: list[bool] = []
SIGNAL, NAMESPACE = "toy-first-step", "raycache-tests"


class FirstStep:
    """A Ray actor (made with ray.remote by the test): the folder to watch, and whether the
    first training step of any worker found a manifest in it (None: no step yet)."""

    def __init__(self, watch: str):
        self.watch, self.committed = watch, None

    def where(self) -> str:
        return self.watch

    def step(self, committed: bool) -> None:
        if self.committed is None:
            self.committed = committed

    def first(self) -> bool | None:
        return self.committed


class Record(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and not FIRST_STEP:
            import glob

            import toy_encoders

            if WATCH:  # in the process that runs the fill
                FIRST_STEP.append(bool(glob.glob(f"{WATCH}/*/*/manifest.json")))
                toy_encoders.GATE.set()
            else:
                import ray

                if not ray.is_initialized():  # local mode, no test watching
                    return x
                try:
                    signal = ray.get_actor(SIGNAL, namespace=NAMESPACE)
                except ValueError:  # no test is watching this run
                    return x
                watch = ray.get(signal.where.remote())
                FIRST_STEP.append(bool(glob.glob(f"{watch}/*/*/manifest.json")))
                ray.get(signal.step.remote(FIRST_STEP[0]))
        return x


def recording_linear(in_dim: int, out_dim: int, hidden: list[int], dropout: float
                     ) -> torch.nn.Module:
    """A linear head that records, at its first training step, whether the cache under WATCH
    was committed yet."""
    return torch.nn.Sequential(torch.nn.Linear(in_dim, out_dim), Record())


SEEN: list[tuple[bool, torch.Tensor]] = []
"""(training?, inputs) of every forward pass of a seeing head in this process."""


class See(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        SEEN.append((self.training, x.detach().clone()))
        return x


def seeing_linear(in_dim: int, out_dim: int, hidden: list[int], dropout: float
                  ) -> torch.nn.Module:
    """A linear head that appends every input batch to SEEN (local-mode runs only)."""
    return torch.nn.Sequential(See(), torch.nn.Linear(in_dim, out_dim))


BUILDS = "raycache-toy-corrupt-head-{uid}.log"
"""In the temp folder: one line per corrupt_linear built (on every worker of every attempt)."""


def corrupt_linear(in_dim: int, out_dim: int, hidden: list[int], dropout: float
                   ) -> torch.nn.Module:
    """A head whose building fails as a worker's read of a damaged shard does (CorruptShard):
    an error that every restart of the worker group would repeat."""
    import os
    import tempfile

    from raycache import CorruptShard

    path = os.path.join(tempfile.gettempdir(), BUILDS.format(uid=os.getuid()))
    with open(path, "a") as f:
        f.write(f"{os.getpid()}\n")
    raise CorruptShard("toy shard-00000.parquet: 12 bytes, expected 34 (sha256 differs); "
                       "run `raycache repair`", uri="toy/shard-00000.parquet")


class _Fails(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("toy: the head's forward pass failed")


def failing_linear(in_dim: int, out_dim: int, hidden: list[int], dropout: float
                   ) -> torch.nn.Module:
    """A head whose first forward pass raises a plain RuntimeError (no raycache type)."""
    return torch.nn.Sequential(torch.nn.Linear(in_dim, out_dim), _Fails())


MARKER: str = ""
"""touching_linear leaves a file here (a test sets it): it shows the head family ran."""


def touching_linear(in_dim: int, out_dim: int, hidden: list[int], dropout: float
                    ) -> torch.nn.Module:
    """A linear head (the registered family's layers) that leaves a file at MARKER."""
    from pathlib import Path

    Path(MARKER).touch()
    return torch.nn.Sequential(torch.nn.Dropout(dropout), torch.nn.Linear(in_dim, out_dim))

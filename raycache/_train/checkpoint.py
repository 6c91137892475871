"""Training checkpoints: the whole state in one folder of a run, written with the head last-safe.

A checkpoint folder `<run>/checkpoint_<epoch>/` holds head.safetensors and head.json (enough to
use the head, see raycache._predict) and state.pt (everything to resume: optimizer, schedule,
scaler, epoch, RNG states, early-stopping state, history). state.pt is written last: a folder
without it is incomplete and never resumed from.
"""

from __future__ import annotations

import io
import json
import os
import random
from typing import TYPE_CHECKING, Any

import numpy as np

from raycache._cache.store import Store
from raycache._heads.specs import HEAD_CONFIG, HEAD_WEIGHTS, HeadSpec
from raycache._heads.weights import encode

if TYPE_CHECKING:
    import torch

__all__ = [
    "PREFIX",
    "STATE",
    "checkpoint_name",
    "latest",
    "prune",
    "read_state",
    "rng_state",
    "set_rng_state",
    "upload",
    "write_folder",
]

PREFIX = "checkpoint_"
STATE = "state.pt"


def checkpoint_name(epoch: int) -> str:
    """Folder name of the checkpoint taken after `epoch` epochs (sorts by epoch)."""
    return f"{PREFIX}{epoch:06d}"


def rng_state() -> dict[str, Any]:
    import torch

    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
             "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import torch

    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def write_folder(folder: str, head: HeadSpec, head_weights: dict[str, torch.Tensor],
                 state: dict[str, Any], info: dict[str, Any]) -> None:
    """Write head.safetensors, head.json and state.pt (last) into a local folder."""
    import torch

    with open(os.path.join(folder, HEAD_WEIGHTS), "wb") as f:
        f.write(encode(head_weights))
    with open(os.path.join(folder, HEAD_CONFIG), "w") as f:
        json.dump({"head": head.to_dict(), **info}, f, indent=2, default=str)
    torch.save(state, os.path.join(folder, STATE))


def upload(store: Store, folder: str, dest: str) -> None:
    """Copy a local checkpoint folder into the store, state.pt last (each file atomically)."""
    names = sorted(os.listdir(folder), key=lambda n: n == STATE)
    for name in names:
        with open(os.path.join(folder, name), "rb") as f:
            store.write_atomic(f"{dest}/{name}", f.read())


def latest(store: Store, run_dir: str) -> str | None:
    """The newest complete checkpoint folder of a run (store path), or None."""
    for name in reversed(store.listdir(run_dir)):
        if name.startswith(PREFIX) and store.exists(f"{run_dir}/{name}/{STATE}"):
            return f"{run_dir}/{name}"
    return None


def read_state(store: Store, path: str) -> dict[str, Any]:
    """state.pt of a checkpoint folder (written by raycache itself, so fully unpickled)."""
    import torch

    return torch.load(io.BytesIO(store.read_bytes(f"{path}/{STATE}")), map_location="cpu",
                      weights_only=False)


def prune(store: Store, run_dir: str, keep: int) -> None:
    """Remove all but the newest `keep` checkpoint folders of this run (never another run's)."""
    names = [n for n in store.listdir(run_dir) if n.startswith(PREFIX)]
    for name in names[:-keep] if keep > 0 else []:
        store.fs.rm(f"{run_dir}/{name}", recursive=True)

"""Training checkpoints: the whole state in one folder of a run, written with the head last-safe.

A checkpoint folder `<run>/checkpoint_<epoch>/` holds head.safetensors and head.json (enough to
use the head, see raycache._predict) and state.pt (everything to resume: optimizer, schedule,
scaler, epoch, RNG states, early-stopping state, history). state.pt is written last: a folder
without it is incomplete and never resumed from. It holds tensors and plain values only, and
is read weights-only: a planted one is refused, never unpickled.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import random
from collections import OrderedDict
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from raycache._cache.store import Store
from raycache._errors import RaycacheError
from raycache._heads.specs import HEAD_CONFIG, HEAD_WEIGHTS, HeadSpec
from raycache._heads.weights import encode

if TYPE_CHECKING:
    import torch

__all__ = [
    "PREFIX",
    "STATE",
    "checkpoint_name",
    "latest",
    "load_state",
    "plain",
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

    name, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {"torch": torch.get_rng_state(), "python": random.getstate(),
             "numpy": (name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss),
                       float(gauss))}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import torch

    torch.set_rng_state(state["torch"])
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), *rest))
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
    torch.save(plain(state), os.path.join(folder, STATE))


def plain(value: Any) -> Any:
    """`value` with numpy arrays as tensors and numpy scalars as Python numbers, so that a
    weights-only read takes it whole."""
    import torch

    if type(value) in (dict, OrderedDict):  # a state_dict keeps its type and _metadata
        out = type(value)((k, plain(v)) for k, v in value.items())
        if hasattr(value, "_metadata"):
            out._metadata = value._metadata
        return out
    if type(value) in (list, tuple):
        return type(value)(plain(v) for v in value)
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, np.generic):
        return value.item()
    return value


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
    """state.pt of a checkpoint folder, read weights-only (see `load_state`)."""
    return load_state(io.BytesIO(store.read_bytes(f"{path}/{STATE}")), f"{path}/{STATE}")


def load_state(f: IO[bytes], where: str) -> dict[str, Any]:
    """A state.pt read weights-only: tensors and plain values (and the numpy values older
    raycache wrote), nothing imported or called.

    Raises:
        RaycacheError: It holds anything else (not written by raycache): named, with the fix.
    """
    import torch

    try:
        with torch.serialization.safe_globals(list(_old_numpy())):
            state = torch.load(f, map_location="cpu", weights_only=True)  # nothing runs
    except (pickle.UnpicklingError, RuntimeError, EOFError, AttributeError) as exc:
        raise RaycacheError(
            f"{where} is not a training state raycache wrote: a weights-only read refuses it "
            f"({str(exc).splitlines()[0][:200]}), and a checkpoint is never unpickled whole. "
            "Start the run afresh: remove that checkpoint folder (or the run's folder), or "
            "train under a new run_name") from exc
    if not isinstance(state, dict):
        raise RaycacheError(f"{where} holds a {type(state).__name__}, not a training state; "
                            "remove that checkpoint folder to start the run afresh")
    return state


def _old_numpy() -> list[Any]:
    """What state.pt held beyond tensors and plain values before raycache saved it plain
    (numpy's RNG state and scalars): allowed in a weights-only read, so those runs resume."""
    from numpy._core import multiarray

    numeric = [t for n in np.dtypes.__all__ if issubclass((t := getattr(np.dtypes, n)).type,
                                                          np.number | np.bool_)]
    return [np.dtype, multiarray.scalar, multiarray._reconstruct, np.ndarray, *numeric]


def prune(store: Store, run_dir: str, keep: int) -> None:
    """Remove all but the newest `keep` checkpoint folders of this run (never another run's)."""
    names = [n for n in store.listdir(run_dir) if n.startswith(PREFIX)]
    for name in names[:-keep] if keep > 0 else []:
        store.fs.rm(f"{run_dir}/{name}", recursive=True)

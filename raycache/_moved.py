"""Old import paths of raycache's internal modules: kept working, or refused with the new path.

Since 0.2 everything but the top-level `raycache` namespace is internal (modules under `_`
names). Code written against the old paths (`from raycache._cache.store import Store`,
`from raycache._errors import ConfigError`) still imports, with a DeprecationWarning naming the
public name or the new path. Paths under `raycache.fill`, `raycache.train`, `raycache.probe`
and `raycache.pipeline` cannot be aliased (those names are the SDK's functions), so importing
one fails with an ImportError that names the new path.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from types import ModuleType

PACKAGES = ("core", "source", "cache", "encoders", "compute", "fill", "heads", "train", "probe",
            "predict", "upkeep", "errors", "cli", "demo", "pipeline")
"""The old names of raycache's internal packages and root modules."""
SDK_NAMES = frozenset({"fill", "train", "probe", "pipeline"})
"""Old packages whose name is now an SDK function: refused, not aliased."""
RENAMED = {"_train.data.overlap": "_train.data.overlap",
           "_train.data.shard_feed": "_train.data.shard_feed",
           "_train.worker_heads": "_train.worker_heads", "_train.best_epoch": "_train.best_epoch",
           "_train.data.share_reads": "_train.data.share_reads"}
"""Modules renamed to plain names, under their new package."""


def new_name(old: str) -> str | None:
    """The module an old `raycache.<package>...` path now lives at, or None if it is not old."""
    parts = old.split(".")
    if len(parts) < 2 or parts[0] != "raycache" or parts[1] not in PACKAGES:
        return None
    rest = "_" + ".".join(parts[1:])
    for before, after in RENAMED.items():
        if rest == before or rest.startswith(before + "."):
            rest = after + rest[len(before):]
    return f"raycache.{rest}"


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec) -> ModuleType:
        module = importlib.import_module(self.target)
        self.spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The module already ran under its new name: give it back its own spec."""
        module.__spec__ = self.spec


class MovedFinder(importlib.abc.MetaPathFinder):
    """Finds old internal paths: an alias of the new module, or an ImportError naming it."""

    def find_spec(self, fullname: str, path=None, target=None):
        new = new_name(fullname)
        if new is None:
            return None
        if fullname.split(".")[1] in SDK_NAMES:
            raise ImportError(
                f"{fullname!r} moved to {new!r}, an internal module since raycache 0.2 "
                f"(raycache.{fullname.split('.')[1]} is the SDK function); import the public "
                f"names from 'raycache' (see raycache.__all__), or from {new!r} at your own risk",
                name=fullname)
        warnings.warn(f"{fullname!r} is internal since raycache 0.2 and moved to {new!r}; "
                      "import the public names from 'raycache'", DeprecationWarning, stacklevel=2)
        return importlib.util.spec_from_loader(fullname, _Alias(new))


def install() -> None:
    """Put the finder on sys.meta_path once."""
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedFinder())  # before the path finder: no second copy

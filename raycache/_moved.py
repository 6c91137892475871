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
RENAMED = {"_train.data.landing": "_train.data.overlap",
           "_train.data.board": "_train.data.shard_feed",
           "_train.team": "_train.worker.heads", "_train.best": "_train.worker.best_epoch",
           "_train.data.shares": "_train.data.rows", "_train.runs": "_train.folder.record",
           **{f"_train.{m}": f"_train.driver.{m}" for m in (
               "plan", "placement", "run", "result", "resources", "failures")},
           **{f"_train.{m}": f"_train.worker.{m}" for m in (
               "loop", "assemble", "epoch", "state", "diverged", "solved")},
           "_train.worker_heads": "_train.worker.heads",
           "_train.best_epoch": "_train.worker.best_epoch"}
"""Modules renamed to plain names in 0.2, and training's moved into `driver/` and `worker/`
since (old path under `_` -> new path): each value must be a module that exists
(tests/test_docs.py checks it)."""


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


def _asked(fullname: str) -> str:
    """The old path being imported when its package `fullname` is refused: `import a.b.c` and
    `python -m a.b.c` look up the package `a.b` first, so the name asked for is read from the
    import machinery's frames (`fullname` itself where none names a longer one)."""
    asked, frame = fullname, sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") in ("importlib._bootstrap", "importlib.util"):
            for local in ("name", "fullname"):
                value = frame.f_locals.get(local)
                if isinstance(value, str) and value.startswith(fullname + ".") \
                        and len(value) > len(asked):
                    asked = value
        frame = frame.f_back
    return asked


def refusal(fullname: str) -> ImportError:
    """The ImportError for an old path under a package whose name is now an SDK function."""
    package = fullname.split(".")[1]
    new = new_name(fullname)
    return ImportError(
        f"{fullname!r} moved to {new!r}, an internal module since raycache 0.2 "
        f"(raycache.{package} is the SDK function); import the public names from 'raycache' "
        f"(see raycache.__all__), or from {new!r} at your own risk", name=fullname)


def notice(fullname: str) -> str:
    """The line an aliased old path warns with."""
    return (f"{fullname!r} is internal since raycache 0.2 and moved to {new_name(fullname)!r}; "
            "import the public names from 'raycache'")


class _Alias(importlib.abc.Loader):
    """Loads an old path as the module at its new path (one module object, not a copy)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec) -> ModuleType:
        module = importlib.import_module(self.target)
        self.spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The module already ran under its new name: give it back its own spec."""
        module.__spec__ = self.spec

    def is_package(self, fullname: str) -> bool:
        """Whether the new module is a package (how `python -m` asks)."""
        spec = importlib.util.find_spec(self.target)
        return spec is not None and spec.submodule_search_locations is not None

    def get_code(self, fullname: str):
        """The new module's code, for `python -m` on an old path: it runs as the new module
        would, after the notice an import gives (shown: `python -m` hides DeprecationWarnings
        raised outside `__main__`)."""
        warnings.warn(notice(fullname), FutureWarning, stacklevel=2)
        spec = importlib.util.find_spec(self.target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "get_code"):
            raise ImportError(f"{fullname!r} moved to {self.target!r}, which cannot be run "
                              "with python -m", name=fullname)
        return spec.loader.get_code(self.target)


class MovedFinder(importlib.abc.MetaPathFinder):
    """Finds old internal paths: an alias of the new module, or an ImportError naming it."""

    def find_spec(self, fullname: str, path=None, target=None):
        new = new_name(fullname)
        if new is None:
            return None
        if fullname.split(".")[1] in SDK_NAMES:
            raise refusal(_asked(fullname))
        warnings.warn(notice(fullname), DeprecationWarning, stacklevel=2)
        return importlib.util.spec_from_loader(fullname, _Alias(new))


def install() -> None:
    """Put the finder on sys.meta_path once."""
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedFinder())  # before the path finder: no second copy

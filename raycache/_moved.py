"""The import paths the public names had before 0.2 (`raycache.errors`, `raycache.cache.committed`,
...): each still imports, with a DeprecationWarning, until REMOVED_IN; every other old path is
refused, naming where the public names are now.

Since 0.2 the public surface is the top-level `raycache` namespace (`raycache.__all__`); the
packages under it are internal, under `_` names. `from raycache.errors import ConfigError` gets
`raycache.ConfigError` and the notice; a path under `raycache.fill`, `.train`, `.probe` or
`.pipeline` cannot be a module (those names are the SDK's functions), so it fails with an
ImportError naming the public names it held.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

SINCE = "0.2"
REMOVED_IN = "0.3"
"""The release these paths go in (tests/test_package.py holds it against the package's version)."""
OLD = {
    "raycache.errors": ("CacheNotFound", "ConfigError", "CorruptCache", "CorruptShard",
                        "DamagedCacheWarning", "EncoderError", "FillFailed", "FingerprintError",
                        "RaycacheError", "SourceError", "StoreError"),
    "raycache.cache.committed": ("Cache", "ls", "open_cache"),
    "raycache.cache.config": ("StoreConfig",), "raycache.cache.manifest": ("Manifest",),
    "raycache.encoders.config": ("EncoderConfig",), "raycache.source.config": ("SourceConfig",),
    "raycache.source.demo_data": ("stdlib_docs",), "raycache.heads.specs": ("HeadSpec",),
    "raycache.heads.loaded": ("Head", "load_head"), "raycache.predict.config": ("PredictConfig",),
    "raycache.predict.run": ("PredictResult", "predict_file"),
    "raycache.upkeep.compact": ("compact",), "raycache.upkeep.du": ("Usage", "du"),
    "raycache.upkeep.gc": ("GcResult", "gc"), "raycache.upkeep.repair": ("repair",),
    "raycache.upkeep.verify": ("Report", "verify"),
    "raycache.fill.config": ("FillConfig",), "raycache.fill.run": ("FillResult", "fill"),
    "raycache.probe.config": ("ProbeConfig",), "raycache.probe.result": ("ProbeResult",),
    "raycache.probe.run": ("probe",), "raycache.train.config": ("TrainConfig",),
    "raycache.train.run": ("TrainResult", "train"), "raycache.train.runs": ("RunInfo", "list_runs"),
    "raycache.train.runspec": ("RunSpec",),
    "raycache.train.objectives.retrieval": ("retrieval_metrics",),
}
"""Each old module path of a public name, and the public names it held (all in raycache.__all__)."""
PACKAGES = ("core", "source", "cache", "encoders", "compute", "fill", "heads", "train", "probe",
            "predict", "upkeep", "errors", "cli", "demo", "pipeline")
"""The old names of raycache's packages and root modules: a path under one is an old path."""
SDK_NAMES = frozenset({"fill", "train", "probe", "pipeline"})
"""Old packages whose name is now an SDK function: refused, never a module."""


def held(path: str) -> list[str]:
    """The public names `path` and the old modules under it held."""
    return sorted({n for old, names in OLD.items() if old == path or old.startswith(path + ".")
                   for n in names})


def notice(path: str) -> str:
    """The line an old path of public names warns with."""
    return (f"{path!r} is an old path, gone in raycache {REMOVED_IN}: import "
            f"{', '.join(held(path))} from 'raycache' (the public names since {SINCE})")


def refusal(path: str) -> ImportError:
    """The ImportError for an old path that no longer imports."""
    package = path.split(".")[1]
    why = (f"raycache.{package} is the SDK function" if package in SDK_NAMES
           else "its modules are internal")
    names = held(path)
    where = f"import {', '.join(names)} from 'raycache'" if names else \
        "import the public names from 'raycache' (raycache.__all__)"
    return ImportError(f"{path!r} is an old path of raycache before {SINCE} ({why}): {where}",
                       name=path)


class _OldPath(importlib.abc.Loader):
    """An old path as a module holding its public names (an old package: an empty one)."""

    def create_module(self, spec) -> ModuleType | None:
        return None  # the default module

    def exec_module(self, module: ModuleType) -> None:
        public = sys.modules["raycache"]  # imported: it installed this finder
        for name in OLD.get(module.__name__, ()):
            setattr(module, name, getattr(public, name))


class MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths: a module of public names, or an ImportError naming them."""

    def find_spec(self, fullname: str, path=None, target=None):
        parts = fullname.split(".")
        if len(parts) < 2 or parts[0] != "raycache" or parts[1] not in PACKAGES:
            return None
        below = any(old.startswith(fullname + ".") for old in OLD)
        if parts[1] in SDK_NAMES or not (below or fullname in OLD):
            raise refusal(fullname)
        if fullname in OLD:
            warnings.warn(notice(fullname), DeprecationWarning, stacklevel=2)
        return importlib.machinery.ModuleSpec(fullname, _OldPath(), is_package=below)


def install() -> None:
    """Put the finder on sys.meta_path once."""
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedFinder())  # before the path finder

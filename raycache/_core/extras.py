"""Optional packages and the raycache extra that installs each: `need` imports one or raises
MissingExtra naming the extra, `lacking` says so as a config problem, before any work."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from raycache._errors import MissingExtra

__all__ = ["EXTRAS", "lacking", "need", "require"]

EXTRAS = {
    "matplotlib": ("matplotlib", "plots"),
    "lance": ("pylance", "export"),
    "qdrant_client": ("qdrant-client", "export"),
    "sklearn": ("scikit-learn", "lexical"),
    "PIL": ("pillow", "images"),
    "datasets": ("datasets", "hub"),
    "ray": ("ray", "ray"),
    "ray.data": ("ray[data]", "ray"),
    "ray.train": ("ray[train]", "ray"),
    "ray.serve": ("ray[serve]", "serve"),
    "mlflow": ("mlflow-skinny", "tracking"),
    "wandb": ("wandb", "tracking"),
}
"""Each optional module raycache imports: (the package that provides it, the extra)."""


def _message(module: str, feature: str) -> str:
    package, extra = EXTRAS[module]
    return (f"{feature} needs {package}, which is not installed: pip install "
            f"'raycache[{extra}]' (or 'raycache[all]' for every optional feature)")


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package (ray of ray.serve) is missing
        return False


def lacking(module: str, feature: str) -> list[str]:
    """The config problem of a feature whose package is missing ([] where it is installed),
    for a plan's list of problems."""
    return [] if _installed(module) else [_message(module, feature)]


def require(module: str, feature: str) -> None:
    """MissingExtra naming the extra where `module` is not installed, without importing it
    (a check before work that may never import it: training in this process)."""
    if not _installed(module):
        package, extra = EXTRAS[module]
        raise MissingExtra(_message(module, feature), extra=extra, package=package)


def need(module: str, feature: str) -> ModuleType:
    """`module` imported, or MissingExtra naming the extra that installs it (`feature` says
    what needs it: "evaluate's confusion.png")."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:  # it, or a package it imports (ray.serve: fastapi)
        package, extra = EXTRAS[module]
        found = "" if exc.name == module else f" (no module named {exc.name!r})"
        raise MissingExtra(_message(module, feature) + found, extra=extra,
                           package=package) from exc

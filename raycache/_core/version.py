"""raycache's version, from the installed package's metadata (one source: pyproject.toml)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["package_version"]


def package_version() -> str:
    """The installed distribution's version; "0+unknown" when raycache runs from a source tree
    that was never installed."""
    try:
        return version("raycache")
    except PackageNotFoundError:
        return "0+unknown"

"""StoreConfig: where caches live, and the default store."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from raycache._core.secrets import seal

__all__ = ["DEFAULT_STORE", "STORE_ENV", "StoreConfig", "default_store"]

DEFAULT_STORE = ".raycache/store"
STORE_ENV = "RAYCACHE_STORE"


def default_store() -> str:
    """The store a config that names none uses: $RAYCACHE_STORE, else a local folder."""
    return os.environ.get(STORE_ENV) or DEFAULT_STORE


@dataclass
class StoreConfig:
    uri: str = field(default_factory=default_store)
    """Where caches live: a local folder, or s3://bucket/prefix or any fsspec URI
    ($RAYCACHE_STORE, else .raycache/store, when left out)."""
    options: dict[str, Any] = field(default_factory=dict)
    """fsspec storage options (e.g. client_kwargs.endpoint_url). Credentials (key, secret,
    token, ...; raycache._core.secrets) are used but never written or shown; the environment works
    too."""
    shared: bool = False
    """Set when a local-folder store is mounted on every node (NFS), to allow multi-node use."""
    timeout_s: float = 300.0
    """Seconds one object-store write or read may take before it fails (a hung endpoint then
    fails the fill with a StoreError instead of stalling it; the fill resumes when run again)."""

    def __post_init__(self) -> None:
        self.options = seal(self.options)

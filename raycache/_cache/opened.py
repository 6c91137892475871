"""The store at the public functions' edge: taken as a StoreConfig or a URI (`opened`), handed
out as a `ReadOnlyStore` (what users may do with `Cache.store`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from raycache._cache.config import StoreConfig, default_store
from raycache._cache.store import Store

__all__ = ["ReadOnlyStore", "opened"]


def opened(store: StoreConfig | Store | str | None, options: dict[str, Any] | None = None
           ) -> Store:
    """The store a public function was given, opened once: a StoreConfig, a URI (with fsspec
    `options`), None for the default ($RAYCACHE_STORE, else .raycache/store), or a store
    already opened (raycache's own callers, and `Cache.store`), as it is."""
    if isinstance(store, Store):
        return store
    if isinstance(store, StoreConfig):
        return Store.from_config(store)
    return Store(store or default_store(), options or {})


class ReadOnlyStore(ABC):
    """The store that holds a cache (`Cache.store`), as users may read it: its URI, its paths,
    what is in a folder, and a file's bytes. raycache opens it (`open_cache`, `ls`), you do not;
    the functions that take a store take it as they take a URI or a StoreConfig.

    Example:
        ```python
        store = raycache.open_cache("docs").store
        store.listdir(store.root)                    # the names of the caches it holds
        store.url(store.path("docs"))                # a path as a URI you can type
        ```
    """

    uri: str
    """The store's URI: an absolute local path, or s3://bucket/prefix or any fsspec URI."""

    @property
    @abstractmethod
    def root(self) -> str:
        """The store's folder in its filesystem's own form (no protocol)."""
        ...

    @abstractmethod
    def path(self, *parts: str) -> str:
        """A path inside the store, in its filesystem's own form.

        Args:
            *parts: The names under the store's root, e.g. a cache's name and fingerprint.

        Returns:
            The path, with no protocol (as `listdir` and `read_bytes` take it).
        """
        ...

    @abstractmethod
    def url(self, path: str) -> str:
        """A path as a full URI, as a user would type it.

        Args:
            path: A path in the filesystem's own form (from `path` or `Cache.shard_paths`).

        Returns:
            The URI (a local path as it is, else with its protocol: s3://...).
        """
        ...

    @abstractmethod
    def listdir(self, path: str) -> list[str]:
        """The names of the entries under a folder of the store, listed afresh.

        Args:
            path: A folder in the filesystem's own form.

        Returns:
            The names, sorted (empty when the folder does not exist).
        """
        ...

    @abstractmethod
    def read_bytes(self, path: str) -> bytes:
        """A whole file of the store.

        Args:
            path: The file, in the filesystem's own form.

        Returns:
            Its bytes.
        """
        ...


ReadOnlyStore.register(Store)

"""The only module that touches storage: cache layout, atomic writes, listing, reachability."""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import fsspec
import pyarrow.fs as pafs
from fsspec.asyn import AsyncFileSystem
from fsspec.implementations.local import LocalFileSystem

from raycache.errors import StoreError

__all__ = ["MANIFEST", "PROGRESS", "RUNS", "SHARDS", "Store", "shard_name"]

MANIFEST = "manifest.json"
"""The commit record, written last."""
SHARDS = "shards"
PROGRESS = "_progress"
"""One record per written shard of an unfinished fill: what resume reads."""
RUNS = "runs"


def shard_name(ranges: list[list[Any]]) -> str:
    """A shard's path in its cache folder, from the source rows it holds: [[block, start, stop],
    ...]. The same rows always get the same name, so a re-run overwrites rather than adds."""
    digest = hashlib.sha256(json.dumps(ranges).encode()).hexdigest()[:8]
    block, start = ranges[0][0], ranges[0][1]
    return f"{SHARDS}/part-{block}-{start:010d}-{digest}.parquet"


@dataclass
class Store:
    """A store URI (folder, s3://bucket/prefix, any fsspec URI) and its fsspec options."""

    uri: str
    options: dict[str, Any] = field(default_factory=dict)
    shared: bool = False
    timeout_s: float = 300.0
    """Deadline of one remote read or write (async filesystems such as s3fs: their own
    connect and read timeouts do not cover a server that accepts and never answers)."""

    @classmethod
    def from_config(cls, cfg: Any) -> Store:
        """The store of a StoreConfig."""
        return cls(cfg.uri, cfg.options, cfg.shared, cfg.timeout_s)

    def __post_init__(self) -> None:
        if "://" not in self.uri:
            self.uri = os.path.abspath(os.path.expanduser(self.uri))
        self.uri = self.uri.rstrip("/")

    def __getstate__(self) -> dict[str, Any]:
        return {"uri": self.uri, "options": self.options, "shared": self.shared,
                "timeout_s": self.timeout_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    @cached_property
    def fs(self) -> fsspec.AbstractFileSystem:
        fs, _ = fsspec.core.url_to_fs(self.uri, **self.options)
        return fs

    @cached_property
    def root(self) -> str:
        return fsspec.core.url_to_fs(self.uri, **self.options)[1]

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, LocalFileSystem)

    def pyarrow_fs(self) -> pafs.FileSystem:
        """The store as a pyarrow filesystem, for Ray Data and Ray Train."""
        if self.is_local:
            return pafs.LocalFileSystem()
        return pafs.PyFileSystem(pafs.FSSpecHandler(self.fs))

    def path(self, *parts: str) -> str:
        """A path inside the store, in the filesystem's own form (no protocol)."""
        return "/".join([self.root, *parts])

    def url(self, path: str) -> str:
        """The full URI of a filesystem path, as a user would type it."""
        return path if self.is_local else self.fs.unstrip_protocol(path)

    def cache_dir(self, name: str, fingerprint: str) -> str:
        return self.path(name, fingerprint)

    def check_reachable(self) -> None:
        """Fail fast, with the fix, when the store cannot be reached."""
        if self.is_local:
            return
        probe_options = dict(self.options)
        if self.fs.protocol[0] in ("s3", "s3a"):
            config = dict(probe_options.get("config_kwargs", {}))
            config.setdefault("connect_timeout", 3)
            config.setdefault("read_timeout", 5)
            config.setdefault("retries", {"max_attempts": 1})
            probe_options["config_kwargs"] = config
        try:
            fs, root = fsspec.core.url_to_fs(self.uri, skip_instance_cache=True, **probe_options)
            fs.ls(root.split("/")[0])
        except Exception as exc:  # the filesystem's own error type varies by backend
            endpoint = os.environ.get("AWS_ENDPOINT_URL") or probe_options.get(
                "client_kwargs", {}
            ).get("endpoint_url", "the default endpoint")
            raise StoreError(
                f"store {self.uri!r} is unreachable through {endpoint} "
                f"({type(exc).__name__}: {exc}); check the endpoint (AWS_ENDPOINT_URL or "
                "store.options.client_kwargs.endpoint_url), the bucket name and the credentials"
            ) from exc

    def exists(self, path: str) -> bool:
        return self.fs.exists(path)

    def _deadline(self) -> dict[str, float]:
        return {"timeout": self.timeout_s} if isinstance(self.fs, AsyncFileSystem) else {}

    def read_bytes(self, path: str) -> bytes:
        return self.fs.cat_file(path, **self._deadline())

    def write_atomic(self, path: str, data: bytes) -> None:
        """Write a whole object so a reader sees all of it or none of it; a failure is a
        StoreError that names the store."""
        try:
            if self.is_local:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                tmp = f"{path}.tmp-{uuid.uuid4().hex}"
                with open(tmp, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            else:
                self.fs.pipe_file(path, data, **self._deadline())  # one PUT, whole
        except Exception as exc:  # each filesystem raises its own types
            raise StoreError(
                f"store {self.uri!r}: writing {self.url(path)!r} failed ({type(exc).__name__}: "
                f"{exc}); check that the store is reachable and writable, then run again (a "
                "fill resumes where it stopped)"
            ) from exc

    def write_json(self, path: str, obj: Any) -> None:
        self.write_atomic(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())

    def read_json(self, path: str) -> Any:
        return json.loads(self.read_bytes(path))

    def listdir(self, path: str) -> list[str]:
        """Names of the entries under path (empty when it does not exist)."""
        try:
            entries = self.fs.ls(path, detail=False, refresh=True)
        except FileNotFoundError:
            return []
        return sorted(e.rstrip("/").rsplit("/", 1)[-1] for e in entries)

    def size(self, path: str) -> int:
        return int(self.fs.size(path))

"""The only module that touches storage: cache layout, atomic writes, listing, reachability."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import IO, TYPE_CHECKING, Any

import fsspec
import pyarrow.fs as pafs
from fsspec.asyn import AsyncFileSystem
from fsspec.implementations.local import LocalFileSystem

from raycache._cache.records import RowRange
from raycache._core.secrets import merge, reveal, seal, split
from raycache._core.transient import is_transient
from raycache._core.workdir import temporary_path_problem
from raycache._errors import StoreError, StoreUnavailable

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = ["MANIFEST", "PROGRESS", "RUNS", "SHARDS", "Store", "shard_name"]

MANIFEST = "manifest.json"
"""The commit record, written last."""
SHARDS = "shards"
PROGRESS = "_progress"
"""One record per written shard of an unfinished fill: what resume reads."""
RUNS = "runs"
_OUTLIVE = ("give an absolute path (store.uri: /path/to/store; the shipped configs: export "
            "RAYCACHE_STORE=/path/to/store where `ray start` runs, jobs/README.md) or object "
            "storage (s3://bucket/prefix), so the cache outlives the job and `raycache ls` finds "
            "it")


def shard_name(ranges: Sequence[RowRange]) -> str:
    """A shard's path in its cache folder, from the source rows it holds (their block, start and
    stop). The same rows always get the same name, so a re-run overwrites rather than adds."""
    digest = hashlib.sha256(json.dumps([r.bare().to_json() for r in ranges]).encode())
    first = ranges[0]
    return f"{SHARDS}/part-{first.block}-{first.start:010d}-{digest.hexdigest()[:8]}.parquet"


@dataclass
class Store:
    """A store URI (folder, s3://bucket/prefix, any fsspec URI) and its fsspec options."""

    uri: str
    """The store's URI: an absolute local path (a relative one is made absolute), or
    s3://bucket/prefix or any fsspec URI."""
    options: dict[str, Any] = field(default_factory=dict)
    """fsspec options, credentials sealed (`_core.secrets`): shown redacted, never written."""
    shared: bool = False
    """A local folder mounted on every node (NFS): multi-node use is allowed."""
    timeout_s: float = 300.0
    """Deadline of one remote read or write (async filesystems such as s3fs: their own
    connect and read timeouts do not cover a server that accepts and never answers)."""
    secrets_ref: Any = field(default=None, repr=False, compare=False)
    """The credentials, when they travel apart from `options`: a Ray ObjectRef (Ray's object
    store is never persisted) fetched where the filesystem is first used (see for_workers)."""

    @classmethod
    def from_config(cls, cfg: Any) -> Store:
        """The store of a StoreConfig."""
        return cls(cfg.uri, cfg.options, cfg.shared, cfg.timeout_s)

    def __post_init__(self) -> None:
        if problem := temporary_path_problem("store", self.uri, _OUTLIVE):
            raise StoreError(problem)
        if "://" not in self.uri:
            self.uri = os.path.abspath(os.path.expanduser(self.uri))
        elif (scheme := self.uri.split("://", 1)[0]) not in {*fsspec.available_protocols(),
                                                             *fsspec.registry}:
            raise StoreError(
                f"store URI {self.uri!r}: unknown scheme {scheme!r}; expected a local folder, "
                "s3://bucket/prefix, or another fsspec URI (e.g. gs://, az://, file://, "
                "memory://): check the spelling")
        self.uri = self.uri.rstrip("/")
        self.options = seal(self.options)

    def __getstate__(self) -> dict[str, Any]:
        return {"uri": self.uri, "options": self.options, "shared": self.shared,
                "timeout_s": self.timeout_s, "secrets_ref": self.secrets_ref}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update({"secrets_ref": None, **state})

    def public(self) -> Store:
        """This store without its credentials (where they come from the environment)."""
        return Store(self.uri, split(self.options)[0], self.shared, self.timeout_s)

    def for_workers(self) -> Store:
        """This store as Ray workers get it: its credentials in Ray's object store, only a
        reference to them in what Ray records (a WorkerSpec in a train loop config, a run config's
        filesystem). Needs a connected Ray; a store without credentials comes back as it is."""
        secret = split(self.options)[1]
        if not secret:
            return self
        import ray

        return dataclasses.replace(self.public(), secrets_ref=ray.put(secret))

    def fsspec_options(self) -> dict[str, Any]:
        """The options as fsspec takes them, credentials revealed."""
        if self.secrets_ref is None:
            return reveal(self.options)
        import ray

        return reveal(merge(self.options, ray.get(self.secrets_ref)))

    @cached_property
    def _reached(self) -> tuple[fsspec.AbstractFileSystem, str]:
        """The filesystem and the store's root in it, from its options resolved once."""
        return fsspec.core.url_to_fs(self.uri, **self.fsspec_options())

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        return self._reached[0]

    @property
    def root(self) -> str:
        return self._reached[1]

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, LocalFileSystem)

    def pyarrow_fs(self) -> pafs.FileSystem:
        """The store as a pyarrow filesystem, for Ray Data and Ray Train: it pickles as this
        Store (credentials sealed or left in Ray's object store), not as the fsspec instance
        (whose pickle holds every option in the clear)."""
        if self.is_local:
            return pafs.LocalFileSystem()
        return pafs.PyFileSystem(_StoreHandler(self))

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
        probe_options = self.fsspec_options()
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

    def check_folder(self) -> None:
        """StoreError where the store's URI names a file rather than a folder."""
        if self.fs.isfile(self.root):
            raise StoreError(
                f"store {self.uri!r} is a file, not a folder: a store is the folder (or bucket "
                "prefix) that holds the caches, e.g. .raycache/store; give that instead"
            )

    @contextlib.contextmanager
    def _served(self, doing: str, path: str) -> Iterator[None]:
        """The store's service failing after its client's retries (raycache._core.transient)
        raised as StoreUnavailable, naming the store, the object and the fix; other errors
        (a missing object) as they are."""
        try:
            yield
        except Exception as exc:  # each filesystem raises its own types
            if not is_transient(exc):
                raise
            raise StoreUnavailable(
                f"store {self.uri!r}: {doing} {self.url(path)!r} failed: the store kept failing "
                f"after its retries ({type(exc).__name__}: {exc}). Run the same command again "
                "(a fill resumes at its last written shard, a training run at its last "
                "checkpoint); store.options sets the retries (README: What raycache guarantees)"
            ) from exc

    def exists(self, path: str) -> bool:
        with self._served("checking", path):
            return self.fs.exists(path)

    def _deadline(self) -> dict[str, float]:
        return {"timeout": self.timeout_s} if isinstance(self.fs, AsyncFileSystem) else {}

    def read_bytes(self, path: str) -> bytes:
        """A whole object. One found missing is looked for once more with the filesystem's
        listings of its folder dropped: another process may have written it after this one
        listed the folder (s3fs answers a size from its cached listing)."""
        with self._served("reading", path):
            try:
                return self.fs.cat_file(path, **self._deadline())
            except FileNotFoundError:
                if self.is_local:
                    raise
                self.fs.invalidate_cache(path.rsplit("/", 1)[0])
                return self.fs.cat_file(path, **self._deadline())

    def write_atomic(self, path: str, data: bytes | Buffer, exclusive: bool = False) -> bool:
        """Write a whole object (bytes, or any buffer: written locally without a copy) so a
        reader sees all of it or none of it; a failure is a StoreError that names the store.
        `exclusive`: only if nothing is at `path` yet (a hard link locally; a conditional PUT,
        If-None-Match, on S3; an existence check elsewhere, which two writers can race); False
        when something was there, and it is left as it was."""
        try:
            if self.is_local:
                return self._write_local(path, data, exclusive)
            data = data if isinstance(data, bytes) else bytes(data)
            if exclusive and self.fs.protocol[0] in ("s3", "s3a"):
                try:
                    self.fs.pipe_file(path, data, mode="create", **self._deadline())
                except FileExistsError:  # s3fs's translation of 412 Precondition Failed
                    return False
                return True
            if exclusive and self.fs.exists(path):
                return False
            self.fs.pipe_file(path, data, **self._deadline())  # one PUT, whole
            return True
        except Exception as exc:  # each filesystem raises its own types
            raise (StoreUnavailable if is_transient(exc) else StoreError)(
                f"store {self.uri!r}: writing {self.url(path)!r} failed ({type(exc).__name__}: "
                f"{exc}); check that the store is reachable and writable, then run again (a "
                "fill resumes where it stopped; a training run, from its last checkpoint if it "
                "saved one)"
            ) from exc

    @staticmethod
    def _write_local(path: str, data: bytes | Buffer, exclusive: bool, attempts: int = 4
                     ) -> bool:
        """write_atomic on a local folder. A folder that another process removes meanwhile (a
        fill that committed clears _progress/, trying 3 times) is made again, as an object store
        needs none."""
        for _ in range(attempts - 1):
            with contextlib.suppress(FileNotFoundError):
                return _write_local_once(path, data, exclusive)
        return _write_local_once(path, data, exclusive)

    @contextlib.contextmanager
    def open_atomic(self, path: str) -> Iterator[IO[bytes]]:
        """A file to stream into that appears at `path` whole when the block ends, and not at
        all when it raises: written under a hidden temporary name beside it, then renamed
        (moved, on object stores: one copy of a complete object)."""
        folder, _, name = path.rpartition("/")
        tmp = f"{folder}/.{name}.tmp-{uuid.uuid4().hex}"
        if self.is_local:
            os.makedirs(folder or ".", exist_ok=True)
        try:
            with self.fs.open(tmp, "wb") as f:
                yield f
            if self.is_local:
                os.replace(tmp, path)
            else:
                self.fs.mv(tmp, path)
        except BaseException:
            with contextlib.suppress(Exception):
                self.fs.rm(tmp)
            raise

    def is_dir(self, path: str) -> bool:
        with self._served("checking", path):
            return self.fs.isdir(path)


    def write_json(self, path: str, obj: Any, exclusive: bool = False,
                   compact: bool = False) -> bool:
        """`obj` as JSON, indented for people to read unless `compact` (records of thousands
        of row ranges, which only raycache reads)."""
        text = json.dumps(obj, sort_keys=True, **({"separators": (",", ":")} if compact else
                                                    {"indent": 2})) + "\n"
        return self.write_atomic(path, text.encode(), exclusive)

    def read_json(self, path: str) -> Any:
        return json.loads(self.read_bytes(path))

    def listdir(self, path: str) -> list[str]:
        """Names of the entries under path (empty when it does not exist), listed afresh and
        the listing not kept (as `files`: another process may write here next)."""
        try:
            with self._served("listing", path):
                entries = self.fs.ls(path, detail=False, refresh=True)
        except FileNotFoundError:
            return []
        finally:
            self.fs.invalidate_cache(path)
        return sorted(e.rstrip("/").rsplit("/", 1)[-1] for e in entries)

    def size(self, path: str) -> int:
        with self._served("checking", path):
            return int(self.fs.size(path))

    def files(self, path: str) -> dict[str, tuple[int, float]]:
        """Every file under path: (size in bytes, modification time in seconds since the
        epoch); empty when path does not exist. Listed afresh, and the listing not kept: other
        processes write here, and a filesystem's cached listing (s3fs's) would hide their files
        from a later open in this one."""
        self.fs.invalidate_cache(path)
        try:
            with self._served("listing", path):
                found = self.fs.find(path, detail=True, withdirs=False)
        except FileNotFoundError:
            return {}
        finally:
            self.fs.invalidate_cache(path)
        return {p: (int(info.get("size") or 0), self._mtime(p, info))
                for p, info in found.items() if info.get("type") != "directory"}

    def _mtime(self, path: str, info: dict[str, Any]) -> float:
        when = info.get("mtime", info.get("LastModified", info.get("updated")))
        if when is None:
            when = self.fs.modified(path)
        if isinstance(when, str):
            when = datetime.fromisoformat(when.replace("Z", "+00:00"))
        return when.timestamp() if isinstance(when, datetime) else float(when)

    def rm(self, path: str) -> None:
        """Remove a file, or a folder and everything under it."""
        with self._served("removing", path):
            self.fs.rm(path, recursive=True)

    def rm_file(self, path: str) -> None:
        """Remove one file, never a folder (an error where `path` is one)."""
        with self._served("removing", path):
            self.fs.rm_file(path)

class _StoreHandler(pafs.FSSpecHandler):
    """pyarrow's fsspec handler over a Store's filesystem, pickled as the Store."""

    def __init__(self, store: Store):
        super().__init__(store.fs)
        self.store = store

    def __reduce__(self) -> tuple:
        return _StoreHandler, (self.store,)


def _write_local_once(path: str, data: bytes | Buffer, exclusive: bool) -> bool:
    """A temporary file beside `path`, renamed over it (or hard linked, when exclusive); the
    temporary file is removed whatever happens (a full disk, an interrupt)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if not exclusive:
            os.replace(tmp, path)
            return True
        try:
            os.link(tmp, path)  # fails if path exists: atomic and exclusive
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)

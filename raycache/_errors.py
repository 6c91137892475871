"""The errors raycache raises: one base class and a few kinds a caller may want to catch."""


class RaycacheError(Exception):
    """Base class: every message names the bad value, what was expected, and the fix."""


class ConfigError(RaycacheError):
    """One or more configuration problems, all listed in one message."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{len(self.problems)} configuration problem(s):\n{lines}")


class SourceError(RaycacheError):
    """The source dataset cannot be read as asked."""


class EncoderError(RaycacheError):
    """An encoder cannot be built, or cannot be cached."""


class FingerprintError(RaycacheError):
    """An input of the cache key cannot be described stably."""


class StoreError(RaycacheError):
    """The store cannot be reached, or holds something it should not."""


class StoreUnavailable(StoreError):
    """The store, or a source's object store, kept failing after its client's retries (503
    SlowDown, 500, a dropped connection, a timeout): the service, not the data. Running the
    same command again resumes (a fill at its last written shard, a run at its checkpoint)."""


class CacheNotFound(StoreError):
    """No committed cache matches the request."""


class CorruptShard(StoreError):
    """A shard's bytes do not match its manifest entry (size or sha256), or it is missing;
    `uri`, `cache` (name/fingerprint) and `problems` say which and what."""

    def __init__(self, message: str, uri: str = "", cache: str = "",
                 problems: tuple[str, ...] = ()):
        super().__init__(message)
        self.uri, self.cache, self.problems = uri, cache, problems

    def __reduce__(self) -> tuple:  # keep the fields across processes (Ray workers)
        return type(self), (str(self), self.uri, self.cache, self.problems)


class CorruptCache(StoreError):
    """A committed cache's manifest or shard list cannot be read (truncated, not JSON, not a
    manifest); `uri` names the file and `cache` (name/fingerprint) the cache."""

    def __init__(self, message: str, uri: str = "", cache: str = ""):
        super().__init__(message)
        self.uri, self.cache = uri, cache

    def __reduce__(self) -> tuple:  # keep the fields across processes (Ray workers)
        return type(self), (str(self), self.uri, self.cache)


class DivergedError(RaycacheError):
    """A training or validation loss became NaN or infinite; the run stopped before saving that
    epoch. Running the same config again repeats it: the fix is in the config or the data."""


class FillFailed(RaycacheError):
    """A fill that training was reading as it ran (pipeline overlap) stopped with an error; its
    written shards are kept, so running it again resumes."""


class BadInput(EncoderError):
    """One input value an encoder cannot take (an unreadable image); `value` and `column` let
    the prepare stage name the row's key."""

    def __init__(self, message: str, value: object = None, column: str = ""):
        super().__init__(message)
        self.value, self.column = value, column

    def __reduce__(self) -> tuple:  # keep the fields across processes (Ray workers)
        return type(self), (str(self), self.value, self.column)


class DamagedCacheWarning(UserWarning):
    """A cache whose manifest or shard list cannot be read was skipped (listing, du, gc, the
    reuse scan); the message names it and the fix."""

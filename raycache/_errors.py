"""The errors raycache raises: one base class and a few kinds a caller may want to catch."""


class RaycacheError(Exception):
    """Base class of raycache's errors: catch it to catch them all.

    Every message names the bad value, what was expected, and the fix. Raised as itself where
    no kind below fits (a checkpoint that is not a head's, a head asked for classes it does not
    have, an output file that cannot be written): read the message for the fix.
    """


class ConfigError(RaycacheError):
    """One or more configuration problems, all listed in one message.

    Raised by fill, train, predict_file, probe, pipeline and gc before any work starts: a key
    that is unknown or misspelled, a value of the wrong type or range, a setting the cache or
    cluster cannot honour (an encoder or label the cache lacks, more workers than nodes). Fix
    each listed problem (`problems` holds them one per line) and run again.
    """

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{len(self.problems)} configuration problem(s):\n{lines}")


class SourceError(RaycacheError):
    """The source dataset cannot be read as asked.

    Raised by a fill (or repair) when source.path matches no files, a file cannot be read in
    its format (empty, truncated, not UTF-8), the files mix formats, lack a column the others
    have, change while the fill reads them, or hold no rows. The message names the file: fix
    the data or source.path (source.format where the suffix does not say), and run again.
    """


class EncoderError(RaycacheError):
    """An encoder cannot be built, or cannot be cached.

    Raised by a fill or a head's predict when a model folder or factory cannot be loaded, or
    an encoder outputs NaN or inf or cannot read an input (on_bad_rows: error). Install or
    point at the model (encoders[].path or factory), or set on_bad_rows: skip to cache the
    other rows.
    """


class FingerprintError(RaycacheError):
    """An input of the cache key cannot be described stably.

    Raised when a fill plans: a source file has no modification time or ETag, or a value in
    the config (an encoder's kwargs, in-memory data) is not plain data or not a finite number.
    Set source.version to name the data's version, or pass strings, numbers, lists and
    mappings.
    """


class StoreError(RaycacheError):
    """The store cannot be reached, or holds something it should not.

    Raised when the store's URI is a temporary folder or a file, its endpoint or credentials
    fail, a write fails, or a manifest is of a format this raycache does not read. Check
    store.uri and store.options (or AWS_ENDPOINT_URL and the credentials), then run again: a
    fill resumes where it stopped.
    """


class StoreUnavailable(StoreError):
    """The store, or a source's object store, kept failing after its client's retries (503
    SlowDown, 500, a dropped connection, a timeout): the service, not the data.

    Raised by any call that reads or writes the store. Running the same command again resumes
    (a fill at its last written shard, a run at its checkpoint); store.options sets the
    client's retries.
    """


class CacheNotFound(StoreError):
    """No committed cache matches the request.

    Raised by open_cache, train, probe, repair and compact when the store holds no committed
    fill of that name (or fingerprint). Fill it first, or check the name and the store
    (`raycache ls STORE` lists what is there).
    """


class CorruptShard(StoreError):
    """A shard's bytes do not match its manifest entry (size or sha256), or it is missing.

    Raised by reads that verify (read_table, to_pandas, training with verify: true, probe):
    the shard was changed or removed after the fill. `uri`, `cache` (name/fingerprint) and
    `problems` say which and what. Fix it with `raycache repair NAME` (re-encodes only the bad
    shards).
    """

    def __init__(self, message: str, uri: str = "", cache: str = "",
                 problems: tuple[str, ...] = ()):
        super().__init__(message)
        self.uri, self.cache, self.problems = uri, cache, problems

    def __reduce__(self) -> tuple:  # keep the fields across processes (Ray workers)
        return type(self), (str(self), self.uri, self.cache, self.problems)


class CorruptCache(StoreError):
    """A committed cache's manifest or shard list cannot be read (truncated, not JSON, not a
    manifest); `uri` names the file and `cache` (name/fingerprint) the cache.

    Raised by open_cache and the reads of that cache; listings, du and gc warn instead
    (DamagedCacheWarning). Fill the cache again with its config (a damaged manifest is
    replaced), `raycache repair` it (a damaged shard list), or remove it with
    `raycache gc --damaged --delete`.
    """

    def __init__(self, message: str, uri: str = "", cache: str = ""):
        super().__init__(message)
        self.uri, self.cache = uri, cache

    def __reduce__(self) -> tuple:  # keep the fields across processes (Ray workers)
        return type(self), (str(self), self.uri, self.cache)


class UntrustedCode(RaycacheError):
    """A checkpoint or a store names code to run that the caller did not trust: a factory path
    (`module:function`) of a torch encoder, or a head family that is not registered.

    Raised by load_head, predict, evaluate, export_head, serve, repair, compact and train (a
    trainable encoder's factory in the manifest) before the code is imported: a head folder or
    a manifest is data, and only registered head families and encoder kinds are built from it.
    `field` names the file and field, `value` the code it names. Pass `trust_code=True`
    (`--trust-code`) if you trust whoever wrote the file, or a list of allowed prefixes
    (`trust_code=["mypkg."]`); or register the family.
    """

    def __init__(self, message: str, field: str = "", value: str = ""):
        super().__init__(message)
        self.field, self.value = field, value

    def __reduce__(self) -> tuple:  # keep the fields across processes (Ray workers)
        return type(self), (str(self), self.field, self.value)


class DivergedError(RaycacheError):
    """A training or validation loss became NaN or infinite; the run stopped before saving that
    epoch.

    Raised by train (and probe's linear and mlp). Running the same config again repeats it:
    the fix is in the config or the data (a lower optim.lr, optim.grad_clip, float32
    precision, or rows with NaN features removed).
    """


class FillFailed(RaycacheError):
    """A fill that training was reading as it ran (pipeline overlap) stopped with an error.

    Raised by pipeline with overlap: true; the fill's own error is its cause. Its written
    shards are kept, so fixing that cause and running the pipeline again resumes.
    """


class BadInput(EncoderError):
    """One input value an encoder cannot take (an unreadable image); `value` and `column` let
    the prepare stage name the row's key.

    Raised by a fill (on_bad_rows: error) and by a head's predict on raw inputs, for an image
    that cannot be read; with on_bad_rows: skip the fill records the row as skipped instead.
    Fix or drop the value in the source, or fill with on_bad_rows: skip.
    """

    def __init__(self, message: str, value: object = None, column: str = ""):
        super().__init__(message)
        self.value, self.column = value, column

    def __reduce__(self) -> tuple:  # keep the fields across processes (Ray workers)
        return type(self), (str(self), self.value, self.column)


class KeptRowsWarning(UserWarning):
    """The shard files a version reads whole miss some of its rows (it shares others in part).

    Warned by `Cache.shard_urls()` on such a version; the message says how many rows the files
    miss. The fix: join `kept_rows()` (or the Parquet at `kept_rows_url()`), or
    `raycache.export` the version; `shard_urls(in_part="ignore")` takes the whole files
    knowingly, and `in_part="raise"` makes it an error.
    """

class MissingExtra(RaycacheError, ImportError):
    """A feature needs a package this install lacks; `extra` names the raycache extra that
    installs it, `package` the package.

    Raised before the feature's work starts where it can: evaluate with an output folder and
    the probe's report (plots: matplotlib), the Lance and Qdrant exports (export), the lexical
    baseline asked for (lexical), hf-image (images), serve (serve), fill and train (ray). Run
    the `pip install 'raycache[EXTRA]'` the message names (`raycache[all]` installs every
    extra). An ImportError too, so code that catches one still does.
    """

    def __init__(self, message: str, extra: str = "", package: str = ""):
        super().__init__(message)
        self.extra, self.package = extra, package

    def __reduce__(self) -> tuple:  # keep the fields across processes (Ray workers)
        return type(self), (str(self), self.extra, self.package)


class DamagedCacheWarning(UserWarning):
    """A cache whose manifest or shard list cannot be read was skipped.

    Warned by ls, du, gc and a fill's reuse scan, which go on without it; the message names
    the cache and the fix (as CorruptCache's). Turn it into an error with
    `warnings.simplefilter("error", raycache.DamagedCacheWarning)`.
    """

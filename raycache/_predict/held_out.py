"""A run's held-out rows: the keys its split left out of training, read from its cache with
their labels and embeddings (what `evaluate` scores with no data, and `--held-out` writes)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from raycache._errors import RaycacheError

if TYPE_CHECKING:
    from raycache._cache.committed import Cache
    from raycache._heads.loaded import Head

__all__ = ["held_out_rows", "split_of", "write_held_out"]


def held_out_rows(cache: Cache, fraction: float, head: Head, label: str
                  ) -> tuple[pa.Table, str]:
    """The rows of `cache` a run with validation fraction `fraction` held out (its key, `label`
    and the head's encoders' columns), and what they are in words."""
    from raycache._fit.split import validation_mask

    if head.spec.trainable:
        raise RaycacheError("this head trains encoders with it, so its cache holds their inputs, "
                            "not embeddings: evaluate it on a labelled file instead")
    key = cache.manifest.key_column
    table = cache.read_table([key, label, *head.spec.encoders])
    table = table.filter(validation_mask(table.column(key), fraction))
    what = f"the validation keys of {cache.name}/{cache.fingerprint[:12]}"
    if not table.num_rows:
        raise RaycacheError(f"{what} hold no rows: the run held none out for validation "
                            "(val_fraction 0, or too few rows); evaluate on a labelled file")
    return table, what


def split_of(path: str, head: Head, options: dict[str, Any]) -> tuple[Any, float]:
    """The cache and validation fraction of the run whose checkpoint `path` is: the run folder
    above it (<store>/<cache>/<fingerprint>/runs/<run>/) and its run.json, checked against the
    cache head.json names."""
    from raycache._cache.finding import open_cache
    from raycache._cache.store import RUNS, Store
    from raycache._train.folder.record import RECORD, read_record

    run_dir = path.rstrip("/").rsplit("/", 1)[0]
    parts = run_dir.rsplit("/", 4)  # store, cache, fingerprint, runs, run
    spec = head.spec
    record = None
    if len(parts) == 5 and parts[1:4] == [spec.cache, spec.fingerprint, RUNS]:
        folder = Store(run_dir, options)
        try:
            record = read_record(folder, folder.root)
        except ValueError:
            record = None
    fraction = (record or {}).get("recipe", {}).get("evaluation", {}).get("val_fraction")
    if not isinstance(fraction, int | float) or isinstance(fraction, bool):
        raise RaycacheError(
            f"checkpoint {path!r} is not in a run folder of its cache with a readable "
            f"{RECORD} (expected <store>/{spec.cache}/{spec.fingerprint}/{RUNS}/<run>/"
            "checkpoint_*): the run's validation keys cannot be found; evaluate it on a "
            "labelled file (--input)")
    return open_cache(spec.cache, Store(parts[0], options), spec.fingerprint), float(fraction)


def write_held_out(checkpoint: str, target: str, *, label: str | None = None,
                   trust_code: Any = False, **options: Any) -> int:
    """Write the held-out keys and labels of the run whose checkpoint (or run folder) is
    `checkpoint` to `target` (Parquet; JSON lines where it ends .jsonl, CSV where .csv), for
    joining with the source's rows; returns the rows written."""
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    from raycache._heads.loaded import load_head
    from raycache._train.folder.record import checkpoint_of

    path = checkpoint_of(checkpoint, options)
    head = load_head(path, trust_code=trust_code, **options)
    label = label or head.spec.label
    cache, fraction = split_of(path, head, options)
    table, _ = held_out_rows(cache, fraction, head, label)
    table = table.select([cache.manifest.key_column, label])
    try:
        if target.endswith(".jsonl"):
            table.to_pandas().to_json(target, orient="records", lines=True)
        elif target.endswith(".csv"):
            pcsv.write_csv(table, target)
        else:
            pq.write_table(table, target)
    except OSError as exc:
        raise RaycacheError(f"cannot write the held-out rows to {target!r} ({exc}); name a "
                            "file in a folder that exists and you may write to") from exc
    return table.num_rows

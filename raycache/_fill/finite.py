"""Non-finite embeddings: which rows an encoder's stored outputs (after the storage cast) hold
NaN or inf, and the error that names them and their likely cause."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from raycache._errors import EncoderError

__all__ = ["BAD", "ERROR", "ON_BAD_ROWS", "SKIP", "bad_rows", "mark", "non_finite_error",
           "stored"]

ERROR, SKIP = "error", "skip"
ON_BAD_ROWS = (ERROR, SKIP)
"""FillConfig.on_bad_rows: fail the fill (nothing committed), or fill the rest and record the
skipped rows in the manifest."""

BAD = "__bad"
"""Between the fill's stages: why a row is skipped (null: a good row)."""

SHOWN = 3
"""Keys an error names at most."""


def bad_rows(stored: np.ndarray) -> np.ndarray | None:
    """Which rows of `stored` ([rows, ...], as stored) hold a NaN or an inf; None when none do.
    One vectorised pass, ~1% of a fill's time: float16, a row whose largest exponent field is
    all ones (NaN or inf); float32, each row's sum as one BLAS matrix-vector product (NaN or
    inf exactly where the row holds one, or where finite values overflow it: those rows
    checked value by value)."""
    if not stored.size:
        return None
    flat = stored.reshape(len(stored), -1)
    if flat.dtype == np.float16:
        bad = (flat.view(np.uint16) & 0x7C00).max(axis=1) == 0x7C00
    elif flat.dtype in (np.float32, np.float64):
        with np.errstate(all="ignore"):  # inf - inf: NaN, which is what is asked
            maybe = ~np.isfinite(flat @ np.ones(flat.shape[1], flat.dtype))
        bad = np.zeros(len(flat), bool)
        if maybe.any():
            bad[maybe] = ~np.isfinite(flat[maybe]).all(axis=1)
    else:
        bad = ~np.isfinite(flat).all(axis=1)
    return bad if bad.any() else None


def stored(raw: np.ndarray, dtype: str) -> np.ndarray:
    """The encoder's outputs `raw` in the storage dtype (no copy where they are already): an
    overflow becomes inf, which bad_rows then finds, so numpy's own warning is left out."""
    with np.errstate(over="ignore"):
        return raw.astype(dtype, copy=False)


def non_finite_error(encoder: str, dtype: str, bad: np.ndarray, table: pa.Table, key: str,
                     raw: np.ndarray | None, what: str = "outputs") -> EncoderError:
    """The error for rows `bad` of `table` whose stored embeddings are not finite: the encoder,
    how many rows, a few keys and files, and the likely cause; `raw`, the encoder's outputs
    before the storage cast (None: reused, not encoded)."""
    rows = np.flatnonzero(bad)
    return EncoderError(
        f"encoder {encoder!r} gave non-finite {what} (NaN or inf) for {len(rows)} of "
        f"{table.num_rows} rows of a block, e.g. {_where(table, rows[:SHOWN], key)}. "
        f"{cause(dtype, raw, bad)} Nothing was committed. To fill the other rows and record "
        "these as skipped (a later fill retries them), set `on_bad_rows: skip` in the fill "
        "config")


def cause(dtype: str, raw: np.ndarray | None, bad: np.ndarray) -> str:
    """The likely cause, in words: a float16 overflow (the largest magnitude seen, and the
    fix), or the encoder's own NaN/inf."""
    if raw is not None and len(raw) == len(bad):
        values = raw[bad]
        finite = values[np.isfinite(values)]
        largest = float(np.abs(finite).max()) if finite.size else 0.0
        limit = float(np.finfo(dtype).max)
        if np.isfinite(values).all() and largest > limit:
            return (f"Likely cause: {dtype} overflow: the encoder's outputs reach "
                    f"{largest:.4g}, above {dtype}'s largest value {limit:.6g}; store them as "
                    f"`dtype: float32` (or scale or normalise the outputs).")
        if not np.isfinite(values).all():
            return ("The encoder itself returned NaN or inf for these rows: check their input "
                    "values (NaN features, empty inputs) and the model's numerical stability.")
    if raw is None:
        return ("These embeddings were reused from a cache in the store that holds them; "
                "fill with `reuse: false` to encode them again.")
    return ""


def mark(table: pa.Table, bad: np.ndarray, reason: str) -> pa.Table:
    """`table` with rows `bad` marked to be skipped for `reason` (kept where a row already has
    one)."""
    new = pa.array(np.where(bad, reason, None), pa.string())
    if BAD not in table.column_names:
        return table.append_column(BAD, new)
    old = table.column(BAD).combine_chunks()
    merged = pa.array(np.where(old.is_null().to_numpy(zero_copy_only=False),
                               new.to_numpy(zero_copy_only=False),
                               old.to_numpy(zero_copy_only=False)), pa.string())
    return table.set_column(table.schema.get_field_index(BAD), BAD, merged)


def _where(table: pa.Table, rows: np.ndarray, key: str) -> str:
    take = pa.array(rows)
    keys = table.column(key).take(take).to_pylist() if key in table.column_names \
        else [None] * len(rows)
    if "__source" not in table.column_names:
        return ", ".join(f"{key}={k!r}" for k in keys)
    sources = table.column("__source").take(take).to_pylist()
    at = table.column("__row").take(take).to_pylist()
    return ", ".join(f"{key}={k!r} (row {r} of {s})"
                     for k, r, s in zip(keys, at, sources, strict=True))

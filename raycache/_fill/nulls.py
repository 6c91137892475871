"""Null inputs: a null value an encoder would read is an error naming its rows (or, with
on_bad_rows: skip, a skipped row), never encoded as an empty value nor reused."""

from __future__ import annotations

from raycache._errors import BadInput

__all__ = ["null_input"]


def null_input(encoder: str, column: str, nulls: int, rows: int) -> BadInput:
    """The error for null values in an encoder's input column (`nulls` of a block's `rows`).
    The prepare stage adds the first such row's key, file and row; with on_bad_rows: skip, the
    fill skips every null row with this message as its reason."""
    more = f"; {nulls - 1} more in the block" if nulls > 1 else ""
    return BadInput(
        f"encoder {encoder!r}: input column {column!r} is null in {nulls} of {rows} rows of a "
        f"block (the first is named below{more}). A null input is never encoded as an empty "
        "value nor reused. Fill or drop those rows in the source, or set `on_bad_rows: skip` "
        "to fill the rest and record them as skipped", None, column)

"""Progress of a long step on a terminal (a spinner with its elapsed time, or a bar of rows),
and a line per step (or per batch of rows) in a pipe or a log, so no step waits in silence."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from typing import Any, TextIO

__all__ = ["Lines", "rows_bar", "step"]


def _terminal(stream: TextIO) -> bool:
    return bool(getattr(stream, "isatty", None) and stream.isatty())


@contextlib.contextmanager
def step(show: bool, what: str, stream: TextIO | None = None) -> Iterator[None]:
    """`what` (e.g. "probe minilm logreg: 3 settings on 9,412 rows") while the block runs: a
    spinner with the elapsed seconds on a terminal, else one line as it starts."""
    stream = stream or sys.stdout
    if not show:
        yield
        return
    if not _terminal(stream):
        print(f"{what} ...", file=stream, flush=True)
        yield
        return
    from rich.console import Console

    with Console(file=stream).status(what):
        yield


class Lines:
    """A bar of rows as lines: one per update, with the rows done and their rate since the
    first update, so the first (which holds a model's load) is left out of it (what a pipe or
    a log gets instead of a redrawn bar)."""

    def __init__(self, total: int | None, desc: str, stream: TextIO):
        self.total, self.desc, self.stream = total, desc, stream
        self.n, self.first, self.start = 0, 0, time.perf_counter()

    def update(self, rows: int) -> None:
        now, self.n = time.perf_counter(), self.n + rows
        of = f"/{self.total:,}" if self.total else ""
        if not self.first:  # the first batch: its time holds the model's load
            self.first, said = self.n, f" in {now - self.start:.1f} s (with the model's load)"
            self.start = now
        else:
            said = f", {(self.n - self.first) / max(now - self.start, 1e-9):,.0f} rows/s"
        print(f"{self.desc}: {self.n:,}{of} rows{said}", file=self.stream, flush=True)

    def close(self) -> None:
        """Nothing to close: each line is already written."""


@contextlib.contextmanager
def rows_bar(show: bool, total: int | None, desc: str, stream: TextIO | None = None
             ) -> Iterator[Any]:
    """A bar of rows (`update(rows)`): tqdm on a terminal, `Lines` otherwise, nothing shown
    unless `show`."""
    stream = stream or sys.stderr
    if show and not _terminal(stream):
        bar: Any = Lines(total, desc, stream)
    else:
        from tqdm.std import tqdm

        bar = tqdm(total=total, disable=not show, unit=" rows", desc=desc, file=stream,
                   dynamic_ncols=True)
    try:
        yield bar
    finally:
        bar.close()

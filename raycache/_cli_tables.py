"""The command line's tables: drawn by rich on a terminal; where stdout is a pipe or a file,
the plain lines scripts parse (one row a line, the same on every run)."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["frame_table", "print_table"]


def print_table(columns: list[str], rows: list[list[Any]], plain: list[str] | None = None,
                title: str | None = None) -> None:
    """Print rows under their column names: a rich table on a terminal, else `plain` (default:
    the cells joined by two spaces, one row a line, after a header line)."""
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table(*columns, title=title, show_edge=False, header_style="bold")
        for row in rows:
            table.add_row(*(str(cell) for cell in row))
        Console(file=sys.stdout).print(table)
        return
    if plain is None:
        plain = ["  ".join(columns)] + ["  ".join(str(cell) for cell in row) for row in rows]
    for line in plain:
        print(line)


def frame_table(frame: Any) -> str:
    """A DataFrame as a table: rich's on a terminal, else pandas' own text without its index
    (as scripts read it)."""
    if not sys.stdout.isatty():
        return frame.to_string(index=False)
    import io

    from rich.console import Console
    from rich.table import Table

    table = Table(*map(str, frame.columns), show_edge=False, header_style="bold")
    for row in frame.itertuples(index=False):
        table.add_row(*(f"{v:.4f}" if isinstance(v, float) else str(v) for v in row))
    out = io.StringIO()
    Console(file=out, force_terminal=True, width=max(80, Console().width)).print(table)
    return out.getvalue().rstrip("\n")

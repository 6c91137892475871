"""The command line's tables: drawn by rich on a terminal; where stdout is a pipe or a file,
the plain lines scripts parse (one row a line, the same on every run)."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["frame_table", "print_table"]


def print_table(columns: list[str], rows: list[list[Any]], plain: list[str] | None = None,
                title: str | None = None) -> None:
    """Print rows under their column names: a rich table on a terminal wide enough for it, else
    `plain` (default: the cells joined by two spaces, one row a line, after a header line)."""
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title, show_edge=False, header_style="bold")
        for i, name in enumerate(columns):  # the last column (a path, a list) folds
            last = i == len(columns) - 1
            table.add_column(name, no_wrap=not last, overflow="fold" if last else "ellipsis")
        for row in rows:
            table.add_row(*(str(cell) for cell in row))
        console = Console(file=sys.stdout)
        if _fits(console, table, columns):
            console.print(table)
            return
    if plain is None:
        plain = ["  ".join(columns)] + ["  ".join(str(cell) for cell in row) for row in rows]
    for line in plain:
        print(line)


def _fits(console: Any, table: Any, columns: list[str]) -> bool:
    """Whether the table's columns but the last fit the terminal's width whole (else the plain
    lines: a table squeezed into a narrow terminal cuts every cell)."""
    from rich.measure import Measurement

    head = table.columns[:-1]
    need = sum(Measurement.get(console, console.options, column).maximum
               for column in (_column_cells(table, i) for i in range(len(head))))
    return need + 3 * len(columns) + 20 <= console.width


def _column_cells(table: Any, i: int) -> Any:
    from rich.text import Text

    column = table.columns[i]
    return Text("\n".join([str(column.header), *map(str, column.cells)]))


def frame_table(frame: Any) -> str:
    """A DataFrame as a table: rich's on a terminal wide enough for it, else pandas' own text
    without its index (as scripts read it)."""
    if not sys.stdout.isatty():
        return frame.to_string(index=False)
    import io

    from rich.console import Console
    from rich.table import Table

    columns = list(map(str, frame.columns))
    table = Table(*columns, show_edge=False, header_style="bold")
    for row in frame.itertuples(index=False):
        table.add_row(*(f"{v:.4f}" if isinstance(v, float) else str(v) for v in row))
    width = Console(file=sys.stdout).width
    if not _fits(Console(file=sys.stdout), table, columns):
        return frame.to_string(index=False)
    out = io.StringIO()
    Console(file=out, force_terminal=True, width=width).print(table)
    return out.getvalue().rstrip("\n")

"""The one shape of a raycache command: its name, its help line, the options it adds to its
parser and what it runs. Every command module hands on `COMMANDS`, a tuple of them; `entry`
gathers them by name."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Command"]


@dataclass(frozen=True)
class Command:
    """One `raycache NAME` command: `add(parser)` gives its parser its arguments, `run(args)`
    does the work and returns the exit code (raycache._cli.scripting.EXIT_CODES)."""

    name: str
    help: str
    """One line: `raycache -h` lists it, and it opens `raycache NAME -h`."""
    add: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]

    def parser(self, sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
        """This command's parser among `sub`'s, with its arguments."""
        p = sub.add_parser(self.name, help=self.help, description=self.help)
        self.add(p)
        return p

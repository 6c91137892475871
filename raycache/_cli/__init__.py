"""The raycache command line, one room: `run` (the console script `raycache` and `python -m
raycache`), `main` (one command, its exit code) and `build_parser`, handed on from `entry`."""
# PYTHON_ARGCOMPLETE_OK (argcomplete's global completion reads this marker)

from raycache._cli.entry import COMMANDS, build_parser, main, run

__all__ = ["COMMANDS", "build_parser", "main", "run"]

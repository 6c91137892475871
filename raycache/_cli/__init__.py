"""The raycache command line, one room: `main` (the console script `raycache` and `python -m
raycache`) and `build_parser`, handed on from `entry`."""
# PYTHON_ARGCOMPLETE_OK (argcomplete's global completion reads this marker)

from raycache._cli.entry import COMMANDS, build_parser, main

__all__ = ["COMMANDS", "build_parser", "main"]

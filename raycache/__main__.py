"""python -m raycache: the command line."""

from raycache._cli import run

run()

"""python -m raycache: the command line."""

from raycache.cli import main

raise SystemExit(main())

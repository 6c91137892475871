"""The command line's tests, one file per side of it (raycache/_cli/)."""

"""EXPORT: a version's exact rows out to the tools people read vectors with; the `EXPORTERS`
registry (format name -> its module's `check` and `write`)."""

from raycache._export import lance, parquet, qdrant

EXPORTERS = {"parquet": parquet, "lance": lance, "qdrant": qdrant}
"""Export formats: each module has `check(to, options, overwrite)` (problems, before anything is
read) and `write(rows, to, options, overwrite, **settings)`."""

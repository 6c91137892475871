"""Warnings pointed at the user's call: the first frame outside raycache's own files and the
`__init__` that `dataclasses` writes for its configs (what Python 3.12's `skip_file_prefixes`
does, here on 3.11 too), never a line of raycache's source."""

from __future__ import annotations

import os
import sys
import warnings

__all__ = ["OWN", "warn"]

OWN = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
"""raycache's own folder: frames of files under it are skipped."""


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """`warnings.warn(message, category)` at the innermost caller outside raycache (the
    outermost frame where every caller is raycache's, as under its command line)."""
    level, frame = 2, sys._getframe(1)
    while frame.f_back is not None and (frame.f_code.co_filename.startswith(OWN)
                                        or _written(frame)):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


def _written(frame) -> bool:
    """A dataclass's own `__init__` of a raycache config (code compiled from a string)."""
    code = frame.f_code
    return (code.co_filename == "<string>" and code.co_name == "__init__"
            and type(frame.f_locals.get("self")).__module__.startswith("raycache."))

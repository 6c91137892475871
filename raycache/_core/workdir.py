"""Ray's copy of a job's working_dir: where relative paths land under `ray job submit`."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["job_working_dir", "temporary_path_problem"]

_RAY_DIRS = ("runtime_resources", "working_dir_files")


def job_working_dir(cwd: str | None = None) -> str | None:
    """The folder Ray unpacked this job's working_dir into, when this process runs in it (a
    driver under `ray job submit --working-dir`, or its workers); None otherwise. Ray keeps it
    under the session's runtime_resources/working_dir_files/ and deletes it once unused."""
    parts = Path(cwd or os.getcwd()).parts
    for i in range(len(parts) - 2):
        if parts[i:i + 2] == _RAY_DIRS:
            return str(Path(*parts[:i + 3]))
    return None


def temporary_path_problem(what: str, path: str, fix: str) -> str | None:
    """Why a relative local `path` (named `what`, e.g. "store") cannot be used here, with the
    fix; None where it can (an absolute path or a URI, or no Ray job's working_dir)."""
    if "://" in path or os.path.isabs(os.path.expanduser(path)):
        return None
    copy = job_working_dir()
    if copy is None:
        return None
    return (f"{what} {path!r} is a relative path, and this Ray job runs in Ray's temporary copy "
            f"of its working_dir ({copy}): the path would land there, out of sight, and go when "
            f"Ray deletes the copy; {fix}")

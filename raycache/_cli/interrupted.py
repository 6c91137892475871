"""What the command line says when Ctrl-C stops a command: one line, what was kept and how to
go on, instead of Ray's and torch's tracebacks."""

from __future__ import annotations

__all__ = ["INTERRUPTED", "interrupted"]

INTERRUPTED = {
    "fill": "Nothing was committed; the shards finished before the interrupt are kept, and "
            "running the same command again resumes from them.",
    "repair": "Running the same command again resumes the repair.",
    "train": "Running the same command again resumes the run from its last checkpoint (where "
             "it saved one).",
    "pipeline": "Running the same command again finds or resumes the fill, then resumes the "
                "run from its last checkpoint.",
}
"""What an interrupted command kept, and how to go on, by command."""


def interrupted(command: str) -> str:
    """The line for an interrupted `command`."""
    return f"raycache {command}: interrupted. {INTERRUPTED.get(command, '')}".rstrip()

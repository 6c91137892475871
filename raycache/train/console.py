"""What a training worker prints: one line at a time, and no Ray Train INFO dumps."""

from __future__ import annotations

import logging
import sys

__all__ = ["quiet_ray_train", "say"]


def quiet_ray_train() -> None:
    """No INFO dumps per report ("Reporting training result ...", "Reported metrics ...")."""
    logging.getLogger("ray.train").setLevel(logging.WARNING)


def say(line: str) -> None:
    """One line to stdout, once: Ray Train's worker print() goes both to stdout and to a
    logger, which showed every epoch twice."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()

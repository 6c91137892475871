"""A stage of the stage runner: its callable and keyword arguments (no Ray, no torch)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Stage"]


@dataclass
class Stage:
    """A stage's callable (a class: an actor pool; a function: tasks) and its keyword arguments;
    `local` adds to them where the stage runs in this process."""

    fn: Callable[..., Any]
    kwargs: dict[str, Any] = field(default_factory=dict)
    local: dict[str, Any] = field(default_factory=dict)

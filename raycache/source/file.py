"""SourceFile: one input file and the facts that say whether it changed."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

__all__ = ["SourceFile"]


@dataclass(frozen=True)
class SourceFile:
    """One input file and the facts that say whether it changed."""

    uri: str
    size: int
    version: str

    @property
    def block(self) -> str:
        """Short stable id of this file's content version; names its shards."""
        text = f"{self.uri}|{self.size}|{self.version}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def describe(self) -> dict[str, Any]:
        return {"uri": self.uri, "size": self.size, "version": self.version}

"""SourceFile: one input file and the facts that say whether it changed."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SourceFile"]


@dataclass(frozen=True)
class SourceFile:
    """One input file and the facts that say whether it changed."""

    uri: str
    size: int
    version: str
    version_id: str = ""
    """The object version listed on a bucket with versioning (S3's VersionId): exactly that
    version is read, whatever replaces the object meanwhile, and it is fingerprinted; empty
    elsewhere (then a file that changes during a fill fails it)."""
    access: Any = field(default=None, compare=False, repr=False)
    """The source's options as its listing resolved them (`_core.secrets.Resolved`, shared by
    the listing's files), used by `open` and the checks before the options they are given; left
    behind when the file is pickled."""

    @property
    def block(self) -> str:
        """Short stable id of this file's content version; names its shards."""
        text = f"{self.uri}|{self.size}|{self.version}"
        text += f"|{self.version_id}" if self.version_id else ""
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def describe(self) -> dict[str, Any]:
        out = {"uri": self.uri, "size": self.size, "version": self.version}
        return {**out, "version_id": self.version_id} if self.version_id else out

    @classmethod
    def described(cls, d: dict[str, Any]) -> SourceFile:
        """The file a manifest describes (describe's dict)."""
        return cls(d["uri"], d["size"], d["version"], d.get("version_id", ""))

    def open(self, options: dict[str, Any]) -> Any:
        """fsspec.open of the listed version of the file, for reading bytes (`options`:
        fsspec's, credentials sealed, or a Resolved; the listing's own when the file has it)."""
        import fsspec

        from raycache._core.secrets import resolve

        opened = resolve(self.access if self.access is not None else options)
        if not self.version_id:
            return fsspec.open(self.uri, "rb", **opened)
        return fsspec.open(f"{self.uri}?versionId={self.version_id}", "rb",
                           **{**opened, "version_aware": True})

    def whole(self, options: dict[str, Any], chunk: int = 1 << 24) -> Any:
        """The file's bytes in a pyarrow Buffer of Arrow's own memory, read in this thread: a
        reader pyarrow parses it from holds no Python file (one of pyarrow's threads dropping
        the last reference to one while the interpreter exits aborts it: exit 134)."""
        import pyarrow as pa

        sink = pa.BufferOutputStream()
        with self.open(options) as f:
            while piece := f.read(chunk):
                sink.write(piece)
        return sink.getvalue()

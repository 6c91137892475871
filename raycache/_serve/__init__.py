"""SERVE: a trained head reaching requests: written out as a sentence-transformers folder, or
served over HTTP by a Ray Serve application (frozen encoder + head, batched)."""

from raycache._serve.st_export import export_head

HEAD_EXPORTS = {"sentence-transformers": export_head}
"""The folder formats a head exports to, by name (`raycache export-head --format`)."""

__all__ = ["HEAD_EXPORTS", "export_head"]

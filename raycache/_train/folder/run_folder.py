"""A run folder as the driver reads it: its record (run.json) and newest complete checkpoint
read once when opened, its record written through it, its checkpoints listed again only
after training wrote new ones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from raycache._cache.store import Store
from raycache._train.folder.checkpoints import PREFIX, latest
from raycache._train.folder.metrics import read_sweep
from raycache._train.folder.record import read_record, write_record

__all__ = ["RunFolder"]


@dataclass
class RunFolder:
    """One run's folder under the cache's runs/: what it held when opened (`record`, `latest`),
    kept as it is written through `write` and listed again by `relist`."""

    store: Store
    """Where the folder is."""
    path: str
    """The run folder in the store's filesystem form: `<cache>/runs/<run_name>`."""
    record: dict[str, Any] | None
    """run.json as read when opened, or as last written; None: no run yet."""
    latest: str | None
    """The newest complete checkpoint folder (store path) as last listed; None: none."""

    @classmethod
    def open(cls, store: Store, path: str) -> RunFolder:
        """The folder's record and newest checkpoint, read once."""
        return cls(store, path, read_record(store, path), latest(store, path))

    @property
    def finished(self) -> bool:
        """Whether it holds a finished run with its checkpoint (training it again returns it)."""
        return bool(self.record and self.record.get("status") == "finished" and self.latest)

    @property
    def epochs_done(self) -> int:
        """Epochs of the newest complete checkpoint (0: none): where a run resumes."""
        if self.latest is None:
            return 0
        return int(self.latest.rsplit("/", 1)[-1].removeprefix(PREFIX) or 0)

    def relist(self) -> str | None:
        """The newest complete checkpoint, listed again (training wrote new ones)."""
        self.latest = latest(self.store, self.path)
        return self.latest

    def write(self, record: dict[str, Any], status: str, **more: Any) -> None:
        """run.json written with `status` (raycache._train.folder.record.write_record)."""
        self.record = write_record(self.store, self.path, record, status, **more)

    def sweep(self) -> list[dict[str, Any]]:
        """A sweep's rows (sweep.jsonl)."""
        return read_sweep(self.store, self.path)

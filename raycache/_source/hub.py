"""Hugging Face datasets named by a string in `source.data`: a folder written by
`Dataset.save_to_disk` (loaded, then staged like any in-memory dataset), or a hub dataset id
(`org/name[@revision]`) resolved through the local Hugging Face cache to its data files, which
the fill reads as files (fetched only where the hub can be reached)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raycache._core.extras import need
from raycache._core.hf_cache import hub_cache, offline
from raycache._errors import SourceError
from raycache._source.listing import SUFFIXES

if TYPE_CHECKING:
    from raycache._source.config import SourceConfig

__all__ = ["from_string"]

SAVED = ("state.json", "dataset_dict.json")
"""What a save_to_disk folder holds (a Dataset, a DatasetDict)."""


def from_string(source: SourceConfig) -> tuple[SourceConfig | None, Any]:
    """(the source as hub files, None) for a hub id, or (None, the loaded Dataset) for a
    save_to_disk folder."""
    name = source.data
    folder = Path(name).expanduser()
    if folder.is_dir():
        if not any((folder / f).is_file() for f in SAVED):
            raise SourceError(f"source.data={name!r} is a folder but not one written by "
                              "datasets' save_to_disk (no state.json or dataset_dict.json); "
                              "give its files as source.path instead")
        datasets = need("datasets", f"source.data={name!r} (a save_to_disk folder)")
        return None, datasets.load_from_disk(str(folder))
    snapshot = _snapshot(name)
    files = _split_files(snapshot, source.split, name)
    return dataclasses.replace(source, data=None, path=[str(f) for f in files], split=None), None


def _snapshot(name: str) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    repo, _, revision = name.partition("@")
    cache = hub_cache()
    try:
        return Path(snapshot_download(repo, repo_type="dataset", revision=revision or None,
                                      cache_dir=cache, local_files_only=True))
    except LocalEntryNotFoundError:
        pass
    except Exception as exc:  # a bad id, a damaged cache entry  # noqa: BLE001
        raise SourceError(f"source.data={name!r}: no such dataset in the Hugging Face cache "
                          f"{cache} ({exc}); give a hub dataset id (org/name), a save_to_disk "
                          "folder, or files as source.path") from exc
    fetch = f"`hf download --repo-type dataset {repo}` where the hub can be reached"
    if offline("HF_DATASETS_OFFLINE"):
        raise SourceError(f"source.data={name!r} is not in the Hugging Face cache {cache} and "
                          f"the hub is off (HF_HUB_OFFLINE); run {fetch}")
    try:
        return Path(snapshot_download(repo, repo_type="dataset", revision=revision or None,
                                      cache_dir=cache))
    except Exception as exc:  # no network, no such dataset  # noqa: BLE001
        raise SourceError(f"source.data={name!r} is not in the Hugging Face cache {cache} and "
                          f"could not be downloaded ({type(exc).__name__}); run {fetch}") from exc


def _split_files(snapshot: Path, split: str | None, name: str) -> list[Path]:
    """The snapshot's data files of `split` (by the hub's file naming: a `<split>` folder or a
    file name starting with it), in one format."""
    files = sorted(p for p in snapshot.rglob("*") if p.is_file() and p.suffix in SUFFIXES
                   and not p.name.startswith((".", "_")))
    if not files:
        raise SourceError(f"source.data={name!r}: its snapshot {snapshot} holds no Parquet, CSV "
                          "or JSONL files")
    splits = sorted({_split_of(p.relative_to(snapshot)) for p in files} - {None})
    if split is None:
        if len(splits) > 1:
            raise SourceError(f"source.data={name!r} has splits {splits}; set source.split to "
                              "one of them")
        return files
    chosen = [p for p in files if _split_of(p.relative_to(snapshot)) == split]
    if not chosen:
        raise SourceError(f"source.data={name!r} has no split {split!r}; it has {splits}")
    return chosen


def _split_of(rel: Path) -> str | None:
    """The split a hub data file belongs to: data/train-00000-of-00001.parquet, train.csv,
    train/0000.parquet -> train."""
    parts = [p for p in rel.parts[:-1] if p != "data"]
    if parts:
        return parts[-1]
    stem = rel.name.split(".")[0]
    return stem.split("-")[0] if stem else None

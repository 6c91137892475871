"""The local Hugging Face hub cache, where models and datasets named by hub id are looked up,
read from the environment when asked (so a setting made after import counts)."""

from __future__ import annotations

import os

__all__ = ["hub_cache", "offline"]


def hub_cache() -> str:
    """HF_HUB_CACHE, else HF_HOME/hub, else huggingface_hub's default."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    from huggingface_hub.constants import HF_HUB_CACHE

    return HF_HUB_CACHE


def offline(*more: str) -> bool:
    """Whether the hub must not be reached (HF_HUB_OFFLINE, or any of `more`, set true)."""
    return any(os.environ.get(v, "").lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", *more))

"""Notices about notebook widgets raycache does not use, kept out of notebooks."""

from __future__ import annotations

import logging
import warnings

__all__ = ["quiet_widget_notices"]


def quiet_widget_notices() -> None:
    """No tqdm "IProgress not found" warning (tqdm.auto, imported by transformers, in a kernel
    without ipywidgets) and no Ray "Missing packages: ['ipywidgets']" lines (logged at INFO as
    Ray's modules are imported in a kernel): raycache's progress is plain text. Called when
    raycache is imported, before either is."""
    warnings.filterwarnings("ignore", message="IProgress not found")
    logging.getLogger("ray.widgets.util").setLevel(logging.WARNING)

"""Augmentations for cached views: a dict registry of pure functions (value, rng, **params)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["AUGMENTS", "Augment", "apply", "crop", "gaussian_noise", "word_dropout",
           "word_swap"]

Augment = Callable[..., Any]
"""augment(value, rng: numpy.random.Generator, **params) -> a value of the same type."""


def word_dropout(text: str, rng: np.random.Generator, p: float = 0.1) -> str:
    """Each word dropped with probability p (at least one word kept)."""
    words = text.split()
    if not words:
        return text
    keep = rng.random(len(words)) >= p
    if not keep.any():
        keep[rng.integers(len(words))] = True
    return " ".join(w for w, k in zip(words, keep, strict=True) if k)


def word_swap(text: str, rng: np.random.Generator, swaps: int = 1) -> str:
    """`swaps` times, two words chosen at random trade places."""
    words = text.split()
    if len(words) < 2:
        return text
    for _ in range(swaps):
        i, j = rng.choice(len(words), 2, replace=False)
        words[i], words[j] = words[j], words[i]
    return " ".join(words)


def crop(text: str, rng: np.random.Generator, max_words: int = 64) -> str:
    """A random window of `max_words` consecutive words of a longer text (shorter texts as
    they are)."""
    words = text.split()
    if len(words) <= max_words:
        return text
    start = int(rng.integers(len(words) - max_words + 1))
    return " ".join(words[start : start + max_words])


def gaussian_noise(values: list[float], rng: np.random.Generator, std: float = 0.1
                   ) -> list[float]:
    """Numeric inputs (a list of numbers, e.g. precomputed features) plus N(0, std^2) noise."""
    x = np.asarray(values, np.float64)
    return (x + rng.normal(0.0, std, x.shape)).tolist()


AUGMENTS: dict[str, Augment] = {
    "word_dropout": word_dropout,
    "word_swap": word_swap,
    "crop": crop,
    "gaussian_noise": gaussian_noise,
}
"""kind -> augmentation; an image family adds its own (e.g. AUGMENTS["flip"] = flip)."""


def apply(value: Any, rng: np.random.Generator, steps: list[dict[str, Any]]) -> Any:
    """`value` through each step ({kind: ..., **params}) in order, all drawing from `rng`."""
    for s in steps:
        params = {k: v for k, v in s.items() if k != "kind"}
        value = AUGMENTS[s["kind"]](value, rng, **params)
    return value

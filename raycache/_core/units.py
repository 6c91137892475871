"""Sizes (50GB, 1.5GiB) and durations (7d, 24h, 30m) as people write them, parsed and shown."""

from __future__ import annotations

import re

from raycache._errors import ConfigError

__all__ = ["DURATIONS", "SIZES", "human_duration", "parse_duration", "parse_size"]

SIZES = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
"""Byte units: decimal (KB, MB, GB, TB) and binary (KiB, MiB, GiB, TiB), any case."""
DURATIONS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
"""Duration units: seconds, minutes, hours, days, weeks."""

_NUMBER = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*")


def _parse(text: str | float, units: dict[str, int], what: str, example: str,
           default_unit: str | None) -> float:
    if isinstance(text, int | float) and not isinstance(text, bool):
        value, unit = float(text), default_unit or next(iter(units))
    else:
        match = _NUMBER.fullmatch(str(text))
        value = float(match.group(1)) if match else -1.0
        unit = (match.group(2).lower() or default_unit
                or (next(iter(units)) if value == 0 else None)) if match else None  # 0: any
    if unit not in units or value < 0:
        raise ConfigError([f"{what}={text!r}: expected a number and a unit out of "
                           f"{', '.join(units)} (e.g. {example})"])
    return value * units[unit]


def parse_size(text: str | float, what: str = "size") -> int:
    """Bytes in "50GB", "1.5GiB", "200MB" or a plain number of bytes."""
    return int(_parse(text, SIZES, what, "50GB or 1.5GiB", "b"))


def parse_duration(text: str | float, what: str = "duration") -> float:
    """Seconds in "7d", "24h", "30m", "90s", "2w"; a plain number is seconds only when not a
    string (a bare "7" is refused: days or hours?), but for "0", which is 0 in any unit."""
    return _parse(text, DURATIONS, what, "7d, 24h or 30m", None)


def human_duration(seconds: float) -> str:
    """The largest unit that fits: 3.2d, 5.0h, 12.5m, 40s."""
    for unit in ("d", "h", "m"):
        if seconds >= DURATIONS[unit]:
            return f"{seconds / DURATIONS[unit]:.1f}{unit}"
    return f"{seconds:.0f}s"

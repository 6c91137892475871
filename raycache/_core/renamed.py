"""Settings and keywords renamed since an older release: the old name still read, with a
DeprecationWarning that names the new one and the release it goes in."""

from __future__ import annotations

from typing import Any

from raycache._core.caller import warn
from raycache._errors import ConfigError

__all__ = ["REMOVED_IN", "SINCE", "notice", "renamed_argument", "renamed_keys"]

SINCE = "0.2"
"""The release the new names came in (raycache._moved.SINCE, the old import paths', too)."""
REMOVED_IN = "0.3"
"""The release the old names go in (raycache._moved.REMOVED_IN)."""


def notice(old: str, new: str, where: str = "") -> str:
    """The line an old name warns with; `where`: what it is of (a config, a function)."""
    return (f"{where + ': ' if where else ''}{old} is the old name of {new} (renamed in "
            f"raycache {SINCE}; the old name goes in {REMOVED_IN}): write {new}")


def renamed_keys(data: Any, names: dict[str, str], where: str) -> Any:
    """A config mapping with each old key of `names` (old -> new) under its new name, each one
    warned of; both names given is a ConfigError. Anything but a mapping is returned as is
    (the loader says what is wrong with it)."""
    if not isinstance(data, dict) or not set(names) & set(data):
        return data
    out = dict(data)
    for old, new in names.items():
        if old not in out:
            continue
        if new in out:
            raise ConfigError([f"{old} and {new} are both given: {old} is the old name of "
                               f"{new}; give {new} only"])
        warn(notice(old, new, where), DeprecationWarning)
        out[new] = out.pop(old)
    return out


def renamed_argument(old: str, old_value: Any, new: str, value: Any, where: str,
                     unset: Any = None) -> Any:
    """The value of keyword `new`, given as itself or (warned of) as its old name `old`; both
    given is a TypeError, as Python's own for a keyword given twice. `unset`: what a keyword
    left out holds."""
    if old_value is unset:
        return value
    if value is not unset:
        raise TypeError(f"{where}() got {new}= and {old}=, its old name: give {new}= only")
    warn(notice(f"{old}=", f"{new}=", f"{where}()"), DeprecationWarning)
    return old_value

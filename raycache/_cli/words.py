"""How the command line words what it says: a DamagedCacheWarning on one line, a local store
that is a file refused, the SDK's parameter names in a ConfigError written as the flags that
set them, and a renamed flag's old name taken with a warning naming the new one."""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from raycache._core.renamed import notice
from raycache._errors import ConfigError, DamagedCacheWarning

__all__ = ["GC_FLAGS", "PREDICT_FLAGS", "TRUST_HELP", "flags_named", "old_flag", "one_line",
           "store_folder"]

TRUST_HELP = ("let the checkpoint or manifest name code to run (a head family or an encoder's "
              "factory, module:function); without it only registered kinds are built")


def one_line(shown, command: str):
    """warnings.showwarning that prints a DamagedCacheWarning as one line, as errors are."""
    def show(message, category, *args, **kwargs) -> None:
        if issubclass(category, DamagedCacheWarning):
            print(f"raycache {command}: warning: {message}", file=sys.stderr)
        else:
            shown(message, category, *args, **kwargs)
    return show


# --- a bad store path: a clear error, no traceback ---------------------------------------------

def store_folder(store: str | None) -> None:
    """A local store that is a file (not a folder) is refused here, naming it and the fix."""
    if store and "://" not in store and Path(store).expanduser().is_file():
        from raycache._cache.store import Store

        Store(store).check_folder()


# --- flags named as flags: the SDK's names for them in its messages, as the CLI spells them ---

GC_FLAGS = {"retain": "--retain", "older_than": "--older-than", "max_size": "--max-size",
            "grace": "--grace"}
PREDICT_FLAGS = {"in_process": "--in-process", "pool.num_gpus": "--num-gpus",
                 "checkpoint": "--checkpoint", "input": "--input", "output": "--output"}


@contextlib.contextmanager
def flags_named(names: dict[str, str]) -> Iterator[None]:
    """Re-raise a ConfigError with the SDK's parameter names (`retain=-1`, `set
    pool.num_gpus: 0`) written as this command's flags (`--retain=-1`, `set --num-gpus 0`)."""
    pattern = re.compile(r"(?<![\w.(-])(" + "|".join(map(re.escape, names)) + r")(=|: )")
    try:
        yield
    except ConfigError as exc:
        raise ConfigError([pattern.sub(lambda m: names[m.group(1)] + (
            "=" if m.group(2) == "=" else " "), p) for p in exc.problems]) from exc


# --- a renamed flag: its old name still works, with a warning that names the new one ---------

class _OldFlag(argparse.Action):
    """Sets the new flag's value (its `dest`), after one line on stderr naming the new flag."""

    def __init__(self, option_strings, dest, new: str = "", **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.new = new

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        print(f"{parser.prog}: warning: {notice(option_string, self.new)}",
              file=sys.stderr)
        setattr(namespace, self.dest, values)


def old_flag(p: argparse.ArgumentParser, old: str, new: str, **kwargs) -> None:
    """Add `old`, a flag renamed `new` (already added): left out of --help, it sets what `new`
    sets and warns; `kwargs` as `new`'s (nargs, type, metavar)."""
    dest = next(a.dest for a in p._actions if new in a.option_strings)
    p.add_argument(old, action=_OldFlag, dest=dest, new=new, help=argparse.SUPPRESS,
                   default=argparse.SUPPRESS, **kwargs)

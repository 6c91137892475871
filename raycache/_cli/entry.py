"""The raycache command line: the parser wired from each command group's module, and main()
(one command, its exit code)."""

from __future__ import annotations

import argparse
import sys
import warnings

from raycache._cache.config import default_store
from raycache._cli import jobs, predict, runs, store, upkeep
from raycache._cli.completion import COMPLETION_COMMANDS, add_completion, complete
from raycache._cli.demo import DEMO_COMMANDS, add_demo
from raycache._cli.evaluate import add_evaluate, run_evaluate
from raycache._cli.interrupted import interrupted
from raycache._cli.scripting import CRASH, ERROR, add_export, epilog, export
from raycache._cli.serve import SERVING_COMMANDS, add_serving
from raycache._cli.store import CACHE_HELP, STORE_HELP, checked_store
from raycache._cli.words import one_line
from raycache._core.version import package_version
from raycache._errors import RaycacheError

DESCRIPTION = "Fill caches of frozen-encoder embeddings on Ray, and train heads on them."
GROUPS = (jobs, predict, store, upkeep, runs)
"""The modules of command groups: each has PARSERS and COMMANDS, by command name."""
ORDER = ("fill", "train", "pipeline", "probe", "predict", "ls", "inspect", "repair", "runs",
         "verify", "compact", "du", "gc", "export", "demo", "evaluate", "serving", "completion")
"""The commands in the order `raycache -h` lists them."""


def build_parser() -> argparse.ArgumentParser:
    """The raycache command line: `--store` on every command that reads or writes a store,
    and help text on every option."""
    parser = argparse.ArgumentParser(prog="raycache", description=DESCRIPTION, epilog=epilog())
    parser.add_argument("--version", action="version", version=f"raycache {package_version()}",
                        help="print raycache's version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parsers = {name: add for group in GROUPS for name, add in group.PARSERS.items()}
    parsers.update(export=lambda sub: add_export(sub, STORE_HELP, CACHE_HELP, default_store()),
                   demo=add_demo, evaluate=add_evaluate, serving=add_serving,
                   completion=add_completion)
    for name in ORDER:
        parsers[name](sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit code (raycache._cli.scripting.EXIT_CODES; argparse exits 2)."""
    parser = build_parser()
    complete(parser)  # a shell's tab press: answered and exits
    args = parser.parse_args(argv)
    shown = warnings.showwarning
    warnings.showwarning = one_line(shown, args.command)
    try:
        return COMMANDS[args.command](args)
    except RaycacheError as exc:
        print(f"raycache {args.command}: error: {exc}", file=sys.stderr)
        return ERROR
    except KeyboardInterrupt:  # one line, not Ray's and torch's tracebacks
        print(interrupted(args.command), file=sys.stderr)
        return 130
    except Exception:  # a crash: the traceback, and a code of its own
        import traceback

        traceback.print_exc()
        print(f"raycache {args.command}: crashed (exit code {CRASH}); the traceback is above",
              file=sys.stderr)
        return CRASH
    finally:
        warnings.showwarning = shown


COMMANDS = {
    **{name: run for group in GROUPS for name, run in group.COMMANDS.items()},
    "evaluate": run_evaluate, "export": lambda args: export(args, checked_store(args.store)),
    **DEMO_COMMANDS, **SERVING_COMMANDS, **COMPLETION_COMMANDS,
}

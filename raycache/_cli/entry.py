"""The raycache command line: every command module's `COMMANDS` gathered by name, the parser
made from them, main() (one command, its exit code) and run() (the process's command: the
console script and `python -m raycache`)."""

from __future__ import annotations

import argparse
import atexit
import os
import sys
import threading
import warnings

from raycache._cli import (
    completion,
    demo,
    evaluate,
    export,
    jobs,
    predict,
    runs,
    serve,
    store,
    upkeep,
)
from raycache._cli.command import Command
from raycache._cli.completion import complete
from raycache._cli.interrupted import interrupted
from raycache._cli.scripting import CRASH, ERROR, epilog
from raycache._cli.words import one_line
from raycache._core.version import package_version
from raycache._errors import RaycacheError

DESCRIPTION = "Fill caches of frozen-encoder embeddings on Ray, and train heads on them."
MODULES = (jobs, predict, store, upkeep, runs, export, demo, evaluate, serve, completion)
"""The command modules: each hands on `COMMANDS`, a tuple of Command."""
ORDER = ("fill", "train", "pipeline", "probe", "predict", "ls", "inspect", "repair", "runs",
         "verify", "compact", "du", "gc", "export", "demo", "demo-data", "evaluate",
         "export-head", "serve", "completion")
"""The commands in the order `raycache -h` lists them."""
FOUND = {command.name: command for module in MODULES for command in module.COMMANDS}
COMMANDS: dict[str, Command] = {name: FOUND[name] for name in ORDER}
"""Every raycache command, by name, in ORDER."""


def build_parser() -> argparse.ArgumentParser:
    """The raycache command line: `--store` on every command that reads or writes a store,
    and help text on every option."""
    parser = argparse.ArgumentParser(prog="raycache", description=DESCRIPTION, epilog=epilog())
    parser.add_argument("--version", action="version", version=f"raycache {package_version()}",
                        help="print raycache's version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS.values():
        command.parser(sub)
    return parser


def run() -> None:
    """main() as the whole process, then its exit with main's code once this process's threads
    are done and its exit handlers have run (Ray's shutdown, logging's flush), past the
    interpreter's teardown: a native thread pool (pyarrow's) torn down there while one of its
    threads is alive aborts the process (exit 134, "terminate called without an active
    exception") after a command that has finished."""
    code = main()
    for thread in threading.enumerate():  # what the interpreter's exit would wait for
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit code (raycache._cli.scripting.EXIT_CODES; argparse exits 2)."""
    parser = build_parser()
    complete(parser)  # a shell's tab press: answered and exits
    args = parser.parse_args(argv)
    shown = warnings.showwarning
    warnings.showwarning = one_line(shown, args.command)
    try:
        return COMMANDS[args.command].run(args)
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

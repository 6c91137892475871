"""`raycache completion bash|zsh|fish`: the shell code that completes raycache's commands and
options (argcomplete), and the hook main() calls first."""

from __future__ import annotations

import argparse

__all__ = ["COMPLETION_COMMANDS", "add_completion", "complete"]

SHELLS = ("bash", "zsh", "fish")


def add_completion(sub: argparse._SubParsersAction) -> None:
    """The completion command and its options."""
    text = ("print the shell code that completes raycache's commands and options: "
            "eval \"$(raycache completion bash)\" in ~/.bashrc (zsh: in ~/.zshrc)")
    p = sub.add_parser("completion", help=text, description=text)
    p.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    p.add_argument("--json", action="store_true", help="print the shell and its code as JSON")


def complete(parser: argparse.ArgumentParser) -> None:
    """Answer the shell's completion request and exit, where the shell made one (argcomplete's
    _ARGCOMPLETE variable set); else return at once."""
    import os

    if "_ARGCOMPLETE" not in os.environ:
        return
    import argcomplete

    argcomplete.autocomplete(parser)


def completion(args: argparse.Namespace) -> int:
    import argcomplete

    code = argcomplete.shellcode(["raycache"], shell=args.shell)
    if args.json:
        from raycache._cli.scripting import print_json

        print_json({"shell": args.shell, "code": code})
    else:
        print(code)
    return 0


COMPLETION_COMMANDS = {"completion": completion}
"""The commands this module adds, by name."""

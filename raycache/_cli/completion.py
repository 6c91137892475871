"""`raycache completion bash|zsh|fish`: the shell code that completes raycache's commands and
options (argcomplete), and the hook main() calls first."""

from __future__ import annotations

import argparse

from raycache._cli.command import Command

__all__ = ["COMMANDS", "complete"]

SHELLS = ("bash", "zsh", "fish")


def options(p: argparse.ArgumentParser) -> None:
    """The completion command's options."""
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


COMMANDS = (Command("completion", "print the shell code that completes raycache's commands and "
                                  "options: eval \"$(raycache completion bash)\" in ~/.bashrc "
                                  "(zsh: in ~/.zshrc)", options, completion),)

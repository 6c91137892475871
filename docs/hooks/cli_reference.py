"""MkDocs hook: the command line reference, generated from raycache's own argparse parser."""

from __future__ import annotations

import argparse
import os

MARKER = "<!-- cli-reference -->"


def _usage(parser: argparse.ArgumentParser) -> str:
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal; the page is not one
    return parser.format_help().rstrip()


def cli_markdown() -> str:
    """One section per command: its purpose and its full help, as `raycache COMMAND -h` prints."""
    from raycache._cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    parts = ["```text", _usage(parser), "```"]
    for name, command in sub.choices.items():
        parts += ["", f"## `raycache {name}`", "", command.description or "", "",
                  "```text", _usage(command), "```"]
    return "\n".join(parts)


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 (MkDocs' hook)
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, cli_markdown())

"""One shape for every command: each command module of raycache/_cli/ hands on `COMMANDS`, a
tuple of Command, and the parser is made from them alone."""

import argparse
import importlib
import pkgutil

import raycache._cli
from raycache._cli import COMMANDS, build_parser
from raycache._cli.command import Command
from raycache._cli.entry import MODULES, ORDER


def test_every_command_module_hands_on_its_commands_and_each_is_listed():
    found = {}
    for info in pkgutil.iter_modules(raycache._cli.__path__):
        module = importlib.import_module(f"raycache._cli.{info.name}")
        if hasattr(module, "COMMANDS") and module is not raycache._cli.entry:
            assert module in MODULES, f"raycache._cli.{info.name}: not in entry.MODULES"
            assert isinstance(module.COMMANDS, tuple), info.name
            for command in module.COMMANDS:
                assert isinstance(command, Command), (info.name, command)
                assert command.name not in found, f"{command.name}: in {info.name} and "\
                                                  f"{found[command.name]}"
                found[command.name] = info.name
    assert sorted(found) == sorted(ORDER) == sorted(COMMANDS)
    assert len(MODULES) == len(set(found.values())) >= 10


def test_the_parser_holds_exactly_the_registry_in_order_with_each_commands_help():
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == list(COMMANDS) == list(ORDER)
    helps = {action.dest: action.help for action in sub._choices_actions}
    for name, command in COMMANDS.items():
        assert helps[name] == command.help and sub.choices[name].description == command.help


def test_a_command_runs_through_its_run(monkeypatch, capsys):
    seen = []
    command = Command("ls", "list", lambda p: p.add_argument("--x", help="x"),
                      lambda args: seen.append(args.x) or 7)
    monkeypatch.setitem(COMMANDS, "ls", command)
    assert raycache._cli.main(["ls", "--x", "1"]) == 7 and seen == ["1"]

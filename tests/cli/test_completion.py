"""Shell completion: `raycache completion SHELL` prints argcomplete's code, and a tab press
(argcomplete's request, as the shell makes it) completes commands and their options."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from raycache._cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_prints_the_shells_code(shell, capsys):
    assert main(["completion", shell]) == 0
    code = capsys.readouterr().out
    assert "_python_argcomplete" in code and "raycache" in code


def tab(tmp_path: Path, line: str) -> list[str]:
    """What the shell offers for `line` (the cursor at its end)."""
    out = tmp_path / "offered"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "_ARGCOMPLETE": "1", "COMP_LINE": line,
           "COMP_POINT": str(len(line)), "_ARGCOMPLETE_IFS": "\n",
           "_ARGCOMPLETE_STDOUT_FILENAME": str(out), "COMP_TYPE": "9"}
    subprocess.run([sys.executable, "-m", "raycache"], env=env, timeout=120, check=True,
                   capture_output=True)
    return out.read_text().split("\n")


def test_a_tab_press_completes_commands_and_options(tmp_path):
    assert tab(tmp_path, "raycache pred") == ["predict "]
    assert "--checkpoint" in [w.strip() for w in tab(tmp_path, "raycache predict --ch")]

"""The manual is tested: every Python block in docs/ and README.md runs (or says why not), the
reference documents exactly the public surface, and the command line reference covers every
command."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import raycache

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
FENCE = re.compile(r"^```python\n(.*?)^```\n", re.S | re.M)
NOT_RUN = re.compile(r"<!-- not run: (.*?) -->\s*$")
DIRECTIVE = re.compile(r"^::: (\S+)", re.M)


def blocks(page: Path) -> list[tuple[int, str, str | None]]:
    """(line, code, reason it is not run or None) of each ```python block of a page."""
    text = page.read_text()
    out = []
    for m in FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        reason = NOT_RUN.search(before)
        out.append((text.count("\n", 0, m.start()) + 1, m.group(1),
                    reason.group(1).strip() if reason else None))
    return out


RUNNER = """
import json, sys, traceback
blocks = json.load(open(sys.argv[1]))
scope = {"__name__": "__main__"}
for line, code in blocks:
    try:
        exec(compile(code, f"{sys.argv[2]}:{line}", "exec"), scope)
    except BaseException:
        traceback.print_exc()
        print(f"DOC BLOCK FAILED at {sys.argv[2]}:{line}", file=sys.stderr)
        sys.exit(1)
"""


def test_block_parser_reads_code_and_reasons(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("text\n```python\nx = 1\n```\n<!-- not run: needs S3 -->\n```python\n"
                    "y = 2\n```\n```yaml\nz: 3\n```\n")
    assert blocks(page) == [(2, "x = 1\n", None), (6, "y = 2\n", "needs S3")]


@pytest.fixture(scope="module")
def docs_folder(tmp_path_factory):
    return tmp_path_factory.mktemp("docs")


def test_every_block_not_run_says_why():
    for page in PAGES:
        for line, _, reason in blocks(page):
            assert reason is None or len(reason) > 8, f"{page}:{line}: say why it is not run"


@pytest.mark.parametrize("page", [p for p in PAGES if any(r is None for *_, r in blocks(p))],
                         ids=lambda p: str(p.relative_to(ROOT)))
@pytest.mark.timeout(900)
def test_python_blocks_run(page, docs_folder):
    """A page's blocks run in order in one fresh interpreter, in a folder the pages share (as
    a reader's would be: the demo cache one page fills is a hit for the next)."""
    runnable = [(line, code) for line, code, reason in blocks(page) if reason is None]
    spec = docs_folder / f"blocks-{page.stem}.json"
    spec.write_text(json.dumps(runnable))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAYCACHE_STORE": str(docs_folder / "store"),
           "RAY_ADDRESS": ""}
    done = subprocess.run([sys.executable, "-c", RUNNER, str(spec),
                           str(page.relative_to(ROOT))],
                          cwd=docs_folder, env=env, capture_output=True, text=True, timeout=850)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]


def documented() -> list[str]:
    return [name for page in sorted((ROOT / "docs" / "reference").glob("*.md"))
            for name in DIRECTIVE.findall(page.read_text())]


def test_reference_documents_exactly_the_public_surface():
    names = documented()
    assert len(names) == len(set(names)), "a name documented twice"
    internal = [n for n in names if n.split(".")[0] != "raycache" or len(n.split(".")) != 2
                or n.split(".")[1].startswith("_")]
    assert not internal, f"internal names in the reference: {internal}"
    public = {f"raycache.{n}" for n in raycache.__all__}
    assert set(names) - public == set(), "documented but not in raycache.__all__"
    assert public - set(names) == set(), "public but missing from docs/reference/"


def test_every_public_name_resolves_to_a_raycache_object():
    for name in raycache.__all__:
        obj = getattr(raycache, name)
        module = getattr(obj, "__module__", "")
        assert module.startswith("raycache."), f"raycache.{name} comes from {module!r}"


def test_cli_reference_covers_every_command():
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    try:
        from cli_reference import cli_markdown
    finally:
        sys.path.pop(0)
    from raycache._cli import build_parser

    text = cli_markdown()
    sub = next(a for a in build_parser()._actions if hasattr(a, "choices") and a.choices)
    assert len(sub.choices) >= 12
    for name, command in sub.choices.items():
        assert f"## `raycache {name}`" in text
        for action in command._actions:
            if action.help == argparse.SUPPRESS:  # a renamed flag's old name: --help hides it
                continue
            for flag in action.option_strings:
                assert flag in text, f"raycache {name} {flag} missing from the CLI reference"


def test_old_paths_of_public_names_import_with_a_notice_and_the_rest_name_them():
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from raycache.cache.committed import open_cache
        from raycache.errors import ConfigError
    assert open_cache is raycache.open_cache and ConfigError is raycache.ConfigError
    assert any("'raycache.errors' is an old path, gone in raycache 0.3: import CacheNotFound, "
               "ConfigError" in str(w.message) for w in caught)
    assert all(issubclass(w.category, DeprecationWarning) for w in caught)
    with pytest.raises(ImportError,
                       match=r"'raycache\.cache\.store' .*internal.*raycache\.__all__"):
        __import__("raycache.cache.store")  # Store was never public
    with pytest.raises(ImportError, match=r"raycache\.train is the SDK function\): import "
                                          r"RunInfo, RunSpec, TrainConfig, TrainResult"):
        __import__("raycache.train.run")
    assert callable(raycache.train) and callable(raycache.fill)  # not clobbered by the attempt


def test_old_paths_hold_only_public_names():
    from raycache import _moved

    assert all(path.split(".")[1] in _moved.PACKAGES for path in _moved.OLD)
    for path, names in _moved.OLD.items():
        assert set(names) <= set(raycache.__all__), path


def _run_module(path: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", path], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120)


def test_python_m_on_an_old_path_says_where_the_names_are():
    refused = _run_module("raycache.train.team")
    assert refused.returncode != 0
    assert "'raycache.train' is an old path of raycache before 0.2" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_readme_is_short_and_links_into_the_docs():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / link).is_file(), f"README links to a missing page: {link}"


def test_user_facing_pages_name_no_internal_path():
    """What users read and copy (the manual, the READMEs, deploy/ and the job configs, the
    notebooks) names public entries only: `raycache demo-data`, `raycache:serve_app`, never a
    module under a `_` name."""
    pages = [*PAGES, ROOT / "jobs" / "README.md", ROOT / "deploy" / "README.md",
             *(ROOT / "deploy").glob("*.yaml"), *(ROOT / "jobs" / "configs").glob("*.yaml"),
             *(ROOT / "examples").glob("*.ipynb")]
    found = [f"{page.relative_to(ROOT)}: {m.group(0)}" for page in pages if page.is_file()
             for m in re.finditer(r"raycache\._(?!_)\w+(\.\w+)*", page.read_text())]
    assert not found, found

"""docs/concepts.md defines raycache's words once; public docstrings and the manual use each
in that meaning only. A word's other meanings are listed here as phrases (regular expressions)
that must not appear in a public docstring or a page of docs/ or the README, with the word
docs/concepts.md says to use instead. Read with `inspect` and `ast`, no Ray: the public
callables and dataclass fields test_docstrings reads."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import textwrap
from pathlib import Path

from tests.test_docstrings import members, public

ROOT = Path(__file__).resolve().parent.parent
CONCEPTS = ROOT / "docs" / "concepts.md"

OTHER_MEANINGS: dict[str, dict[str, str]] = {
    "share": {  # versions share shard files; nothing else is a share
        r"\b(its|a|each|this|the) share\b": "a worker's part of the rows: say part; a "
                                            "fraction: say fraction",
        r"\bshare of (the )?(its |the version's )?rows\b": "a fraction: say fraction",
        r"\bper share\b": "a worker's part: say per part",
    },
    "kept rows": {  # the rows a version reads of a shared shard file
        r"\bkeeps its (share|part)\b": "where a worker holds its rows: say holds",
        r"\bwhere each (worker )?keeps\b": "where a worker holds its rows: say holds",
    },
    "version": {  # a committed fingerprint of a name
        r"\bhead version\b": "the newest version: say newest",
    },
}
"""Each defined word -> {phrase of another meaning: which meaning, and the word to use}."""


def docstrings() -> list[tuple[str, str]]:
    """(where, text) of every public docstring: callables, their methods, dataclass fields."""
    out = []
    for name, obj in public():
        out.append((name, inspect.getdoc(obj) or ""))
        if not isinstance(obj, type):
            continue
        out += [(f"{name}.{m}", inspect.getdoc(f) or "") for m, f, _ in members(obj)]
        if dataclasses.is_dataclass(obj):
            body = next(n for n in ast.parse(textwrap.dedent(inspect.getsource(obj))).body
                        if isinstance(n, ast.ClassDef)).body
            for node, after in zip(body, body[1:], strict=False):
                if isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr) \
                        and isinstance(after.value, ast.Constant) \
                        and isinstance(after.value.value, str):
                    out.append((f"{name}.{ast.unparse(node.target)}", after.value.value))
    return out


def misuses(texts: list[tuple[str, str]]) -> list[str]:
    """Each use of a defined word in another meaning, with where and the word to use."""
    out = []
    for where, text in texts:
        flat = " ".join(text.split())
        for word, phrases in OTHER_MEANINGS.items():
            for phrase, why in phrases.items():
                for m in re.finditer(phrase, flat, re.I):
                    out.append(f"{where}: {m.group(0)!r} uses {word!r} in another meaning "
                               f"({why}; docs/concepts.md)")
    return out


def test_every_word_with_other_meanings_is_defined_on_the_concepts_page():
    text = CONCEPTS.read_text()
    defined = {m.lower() for m in re.findall(r"^\| \*\*([^*]+)\*\* \|", text, re.M)}
    assert set(OTHER_MEANINGS) <= defined, set(OTHER_MEANINGS) - defined


def test_public_docstrings_use_each_defined_word_in_its_one_meaning():
    texts = docstrings()
    assert len(texts) > 300  # the fields and methods were read, not just the names
    assert not (found := misuses(texts)), "\n".join(found)


def test_the_manual_uses_each_defined_word_in_its_one_meaning():
    pages = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
    found = misuses([(str(p.relative_to(ROOT)), p.read_text()) for p in pages])
    assert not found, "\n".join(found)


def test_the_check_catches_a_word_used_in_another_meaning():
    found = misuses([("X.placement", "Where each worker keeps its share: in memory."),
                     ("Y.val_fraction", "Share of rows held out."),
                     ("Z.share", "A new version shares the shard files of an older one.")])
    assert [f.split(":")[0] for f in found] == ["X.placement", "X.placement", "X.placement",
                                                "Y.val_fraction"]

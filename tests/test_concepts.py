"""docs/concepts.md defines raycache's words once; public docstrings, the manual and the code
use each in that meaning only. A word's other meanings are listed here as phrases (regular
expressions) that must not appear in a public docstring, a page of docs/ or the README, or a
comment or string of raycache/, and as names that no identifier of raycache/ may have, with
the word docs/concepts.md says to use instead. Read with `inspect`, `ast` and `tokenize`, no
Ray: the public callables and dataclass fields test_docstrings reads, and every module's
source."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import re
import textwrap
import tokenize
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
        r"\b(every|one|their|worker's|streamed|training) share('s)?\b": "a worker's part of the "
                                                                      "rows: say part",
        r"\bshares of\b": "parts of the rows: say parts; a fraction: say fraction",
    },
    "kept rows": {  # the rows a version reads of a shared shard file
        r"\bkeeps its (share|part)\b": "where a worker holds its rows: say holds",
        r"\bwhere each (worker )?keeps\b": "where a worker holds its rows: say holds",
    },
    "version": {  # a committed fingerprint of a name
        r"\bhead version\b": "the newest version: say newest",
    },
    "base": {  # the older version a new version shares with
        r"\blend(s|er|ing)?\b": "the older version whose files a version shares: say base, "
                                 "or shares",
    },
    "part": {  # a worker's portion of the rows
        r"\bhead's parts\b": "a head's model, optimizer and schedule: say kit",
    },
    "sweep": {  # many heads trained in one run
        r"\b(gc's sweep|marks? (before it|and) sweeps?|mark and sweep)\b": "gc's removal of "
                                                                         "what it marked: say "
                                                                         "removal",
    },
    "placement": {  # where a worker holds its rows: cpu, gpu, stream
        r"\bplacement decision\b": "how many workers run: say the decision of how many "
                                    "workers (raycache._compute.workers)",
    },
}
"""Each defined word -> {phrase of another meaning: which meaning, and the word to use}."""

OTHER_NAMES: dict[str, dict[str, str]] = {
    "share": {  # only what a version shares: FillConfig.share, the fill's Shares
        r"^(?!_?(share|shares|Shares)$).*(?i:share)(?![dD])": "a worker's portion of the rows: "
                                                               "say part; a fraction: say "
                                                               "fraction",
    },
    "base": {
        r"(?i)lender": "the older version a version shares with: say base",
    },
    "part": {
        r"^(Parts|build_parts)$": "a head's model, optimizer and schedule: say kit (Kit)",
    },
    "overlap": {  # training while its fill runs: one name
        r"^(first_pass|FirstPass|ShardFeed|RemoteFeed)$": "training while the fill runs: say "
                                                          "overlap (OverlapRows, OverlapFeed)",
    },
}
"""Each defined word -> {identifier of another meaning: which meaning, and the name to use}."""


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


def code(root: Path) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(where, text) of every comment and string, and (where, name) of every identifier a
    module under `root` defines or reads: names, attributes, arguments, functions, classes."""
    texts, names = [], []
    for path in sorted(root.rglob("*.py")):
        source = path.read_text()
        at = str(path.relative_to(root.parent))
        texts += [(f"{at}:{t.start[0]}", t.string.lstrip("#"))
                  for t in tokenize.generate_tokens(io.StringIO(source).readline)
                  if t.type == tokenize.COMMENT]
        for node in ast.walk(ast.parse(source)):
            where = f"{at}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                texts.append((where, node.value))
            name = (node.id if isinstance(node, ast.Name) else
                    node.attr if isinstance(node, ast.Attribute) else
                    node.arg if isinstance(node, ast.arg) else
                    node.name if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef
                                            | ast.ClassDef) else None)
            if name:
                names.append((where, name))
    return texts, names


def misnamed(names: list[tuple[str, str]]) -> list[str]:
    """Each identifier that names another meaning of a defined word, with the name to use."""
    return [f"{where}: {name!r} names another meaning of {word!r} ({why}; docs/concepts.md)"
            for where, name in names for word, rules in OTHER_NAMES.items()
            for rule, why in rules.items() if re.search(rule, name)]


def test_every_word_with_other_meanings_is_defined_on_the_concepts_page():
    text = CONCEPTS.read_text()
    defined = {m.lower() for m in re.findall(r"^\| \*\*([^*]+)\*\* \|", text, re.M)}
    words = set(OTHER_MEANINGS) | set(OTHER_NAMES)
    assert words <= defined, words - defined


def test_public_docstrings_use_each_defined_word_in_its_one_meaning():
    texts = docstrings()
    assert len(texts) > 300  # the fields and methods were read, not just the names
    assert not (found := misuses(texts)), "\n".join(found)


def test_the_manual_uses_each_defined_word_in_its_one_meaning():
    pages = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
    found = misuses([(str(p.relative_to(ROOT)), p.read_text()) for p in pages])
    assert not found, "\n".join(found)


def test_the_code_uses_each_defined_word_in_its_one_meaning():
    texts, names = code(ROOT / "raycache")
    assert len(names) > 10_000 and len(texts) > 3_000  # every module was read
    found = misuses(texts) + misnamed(names)
    assert not found, "\n".join(found)


def test_the_code_check_catches_a_name_of_another_meaning(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(
        "class PairShare:  # each worker's share of the pairs\n"
        "    def lender(self, shares, is_shared, load_part): ...\n"
        "X = 'The fingerprint of the version that lends rows.'\n")
    texts, names = code(tmp_path / "pkg")
    found = sorted(f.split(": ", 1)[1].split()[0] for f in misuses(texts) + misnamed(names))
    assert found == ['"worker\'s', "'PairShare'", "'lender'", "'lends'"]


def test_the_check_catches_a_word_used_in_another_meaning():
    found = misuses([("X.placement", "Where each worker keeps its share: in memory."),
                     ("Y.val_fraction", "Share of rows held out."),
                     ("Z.share", "A new version shares the shard files of an older one.")])
    assert [f.split(":")[0] for f in found] == ["X.placement", "X.placement", "X.placement",
                                                "Y.val_fraction"]

"""Every public callable has a docstring a user can work from, in one style (Google's, as
mkdocstrings renders it): a summary line, `Args:` naming every parameter, `Returns:` when it
returns a value, `Raises:` naming each raycache error it raises in its own body, an `Example:`
with a fenced python block (that parses) for the top-level functions and classes, and a blank
line above each section; every field of a public dataclass, and of the raycache dataclasses
its fields hold, has an attribute docstring; every public error says when it is raised. Read
with `inspect` and `ast`: no Ray, no torch beyond what `import raycache` and the lazy names
load. The public callables: `raycache.__all__` (with `pipeline`), and the public methods and
properties their classes define."""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import inspect
import re
import sys
import textwrap
import types

import raycache

HEADERS = {"Args", "Returns", "Yields", "Raises", "Example", "Note"}
"""The section headers allowed (Google style, as mkdocstrings reads them)."""
ERRORS = {n for n, v in vars(sys.modules[raycache.RaycacheError.__module__]).items()
          if isinstance(v, type) and issubclass(v, BaseException)}
"""raycache's own errors, by name: a `raise` of one must be in the Raises section."""
PENDING: dict[str, str] = {}
"""Problems left because their module is at test_layout's 420-line limit: the module named
must be split before these docstrings fit. Each entry must still be a problem (remove it
once fixed), and no other problem may appear."""


def public() -> list[tuple[str, object]]:
    """`raycache.__all__` and `pipeline`, from the top level if it is a function there, else
    from its module."""
    items = [(name, getattr(raycache, name)) for name in raycache.__all__]
    if "pipeline" not in raycache.__all__:
        value = getattr(raycache, "pipeline", None)
        if not callable(value) or isinstance(value, types.ModuleType):
            value = importlib.import_module("raycache.pipeline").pipeline
        items.append(("pipeline", value))
    return items


def sections(doc: str) -> dict[str, str]:
    """A cleaned docstring's sections by header; "" holds the text before the first one."""
    out, current = {"": []}, ""
    for line in doc.splitlines():
        match = re.fullmatch(r"([A-Z][A-Za-z ]*):", line)
        if match:
            current = match.group(1)
            out[current] = []
        else:
            out[current].append(line)
    return {k: "\n".join(v) for k, v in out.items()}


def described(args: str) -> set[str]:
    """The names an `Args:` section describes: `name:` or `name (type):` at its entries'
    indent, with `*`/`**` for varargs."""
    lines = [line for line in args.splitlines() if line.strip()]
    if not lines:
        return set()
    indent = min(len(line) - len(line.lstrip()) for line in lines)
    names = set()
    for line in lines:
        match = re.match(rf" {{{indent}}}\**(\w+)( \(.*\))?:", line)
        if match and len(line) - len(line.lstrip()) == indent:
            names.add(match.group(1))
    return names


def raised(func: object) -> set[str]:
    """The raycache errors `func` raises in its own body (`raise ConfigError(...)`)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError):
        return set()
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            name = exc.id if isinstance(exc, ast.Name) else getattr(exc, "attr", "")
            if name in ERRORS:
                out.add(name)
    return out


def pending(problems: list[str]) -> list[str]:
    """`problems` less those in PENDING, and a problem for each PENDING entry that is gone."""
    left = [p for p in problems if not any(p.startswith(k) for k in PENDING)]
    gone = [f"{k}: fixed, remove it from PENDING" for k in PENDING
            if k.count(":") and not any(p.startswith(k) for p in problems)]
    return left + gone


def check(name: str, func: object, *, example: bool, value: bool = True) -> list[str]:
    """The problems of one callable's docstring; `example`: an Example is required; `value`:
    a Returns is required when the return annotation is not None (False for properties and
    classes). A dataclass's parameters are its fields, each documented under itself."""
    doc = inspect.getdoc(func)
    if isinstance(func, type) and dataclasses.is_dataclass(func) \
            and (func.__doc__ or "").startswith(f"{func.__name__}("):
        doc = None  # the signature dataclass writes where the class has no docstring
    if not doc or not doc.strip():
        return [f"{name}: no docstring"]
    found = sections(doc)
    problems = []
    if not found[""].strip() or not doc.splitlines()[0].strip():
        problems.append(f"{name}: no one-line summary first")
    problems += [f"{name}: unknown section {h!r} (use one of {sorted(HEADERS)})"
                 for h in found if h and h not in HEADERS]
    lines = doc.splitlines()
    problems += [f"{name}: no blank line above {line!r} (griffe would not see the section)"
                 for i, line in enumerate(lines)
                 if i and re.fullmatch(r"[A-Z][A-Za-z ]*:", line) and lines[i - 1].strip()]
    try:
        sig = None if dataclasses.is_dataclass(func) else inspect.signature(func)
    except (TypeError, ValueError):
        sig = None
    if sig is not None:
        params = [p for p in sig.parameters if p not in ("self", "cls")]
        missing = [p for p in params if p not in described(found.get("Args", ""))]
        if missing:
            problems.append(f"{name}: Args does not describe {', '.join(missing)}")
        ret = sig.return_annotation
        if value and ret is not inspect.Signature.empty and ret not in (None, "None") \
                and "Returns" not in found and "Yields" not in found:
            problems.append(f"{name}: returns {ret} but has no Returns section")
    own = set() if isinstance(func, type) else raised(func)  # a class: each method checked
    unnamed = sorted(e for e in own if e not in found.get("Raises", ""))
    if unnamed:
        problems.append(f"{name}: raises {', '.join(unnamed)} but Raises does not name it")
    if example and "```python" not in found.get("Example", ""):
        problems.append(f"{name}: no Example section with a ```python block")
    for block in re.findall(r"```python\n(.*?)```", doc, re.S):
        try:
            ast.parse(textwrap.dedent(block))
        except SyntaxError as exc:
            problems.append(f"{name}: its example is not Python ({exc.msg}, line {exc.lineno})")
    return problems


def members(cls: type) -> list[tuple[str, object, bool]]:
    """The public methods and properties `cls` defines itself: (name, function, is_property)."""
    out = []
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(value, property):
            out.append((name, value.fget, True))
        elif isinstance(value, functools.cached_property):
            out.append((name, value.func, True))
        elif isinstance(value, (staticmethod, classmethod)):
            out.append((name, value.__func__, False))
        elif inspect.isfunction(value):
            out.append((name, value, False))
    return out


def nested(cls: type, seen: set[type]) -> None:
    """`cls` and the raycache dataclasses its fields' annotations name, at any depth."""
    if cls in seen:
        return
    seen.add(cls)
    scope = vars(sys.modules[cls.__module__])
    for field in dataclasses.fields(cls):
        text = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", "")
        for word in re.findall(r"[A-Za-z_]\w*", text):
            found = scope.get(word)
            if isinstance(found, type) and dataclasses.is_dataclass(found) \
                    and found.__module__.startswith("raycache."):
                nested(found, seen)


def undocumented_fields(cls: type) -> list[str]:
    """The fields declared in `cls`'s own body with no string right under them."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef)).body
    out = []
    for i, node in enumerate(body):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        if node.target.id.startswith("_") or "ClassVar" in ast.unparse(node.annotation):
            continue
        after = body[i + 1] if i + 1 < len(body) else None
        if not (isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str) and after.value.value.strip()):
            out.append(f"{cls.__name__}.{node.target.id}")
    return out


def test_every_public_callable_has_a_structured_docstring():
    problems = []
    for name, obj in public():
        if isinstance(obj, type) and issubclass(obj, BaseException):
            continue
        problems += check(name, obj, example=True, value=not isinstance(obj, type))
        if isinstance(obj, type):
            for member, func, is_property in members(obj):
                problems += check(f"{name}.{member}", func, example=False,
                                  value=not is_property)
    problems = pending(problems)
    assert not problems, "docstrings to complete:\n" + "\n".join(problems)


def test_every_public_dataclass_field_has_a_docstring():
    classes: set[type] = set()
    for _, obj in public():
        if isinstance(obj, type) and dataclasses.is_dataclass(obj):
            nested(obj, classes)
    missing = [f for cls in sorted(classes, key=lambda c: c.__name__)
               for f in undocumented_fields(cls)]
    missing = [f for f in missing if f not in PENDING] + [
        f"{k}: fixed, remove it from PENDING" for k in PENDING
        if ":" not in k and k not in missing]
    assert not missing, "fields with no docstring under them:\n" + "\n".join(missing)


def test_every_public_error_says_when_it_is_raised():
    for name, obj in public():
        if isinstance(obj, type) and issubclass(obj, BaseException):
            doc = inspect.getdoc(obj) or ""
            assert obj.__doc__ and re.search(r"\b(Raised|Warned)\b", doc), \
                f"{name}: say when it is raised (\"Raised by ...\") and the usual fix"


def test_the_checks_catch_a_bare_docstring():
    def bare(cache: str, *, limit: int = 0) -> int:
        """Count rows."""
        raise raycache.ConfigError([f"{cache}{limit}"])

    problems = "\n".join(check("bare", bare, example=True))
    for part in ("Args does not describe cache, limit", "no Returns section",
                 "raises ConfigError", "no Example"):
        assert part in problems

    def good(cache: str, *, limit: int = 0) -> int:
        """Count rows.

        Args:
            cache: The cache's name.
            limit (int): At most this many.

        Returns:
            The count.

        Raises:
            ConfigError: Never, in fact.

        Example:
            ```python
            good("docs")
            ```
        """
        raise raycache.ConfigError([f"{cache}{limit}"])

    assert check("good", good, example=True) == []

    @dataclasses.dataclass
    class Half:
        documented: int = 0
        """Said."""
        bare: int = 0

    assert undocumented_fields(Half) == ["Half.bare"]

    def broken() -> None:
        """Do nothing.

        Example:
            ```python
            raycache.fill({..., "store": store})
            ```
        """

    assert "its example is not Python" in "\n".join(check("broken", broken, example=True))

    def cramped() -> int:
        """Count.
        Returns:
            The count.
        """
        return 0

    assert "no blank line above 'Returns:'" in "\n".join(check("cramped", cramped,
                                                               example=False))


def test_placeholders_in_public_docstrings_are_code_so_the_reference_shows_them():
    """A bare `<name>` in a docstring is an HTML tag to the rendered reference, which swallows
    it: every placeholder of a module that defines a public name is in backticks."""
    import ast
    import pathlib

    files = {pathlib.Path(inspect.getfile(getattr(raycache, n))) for n in raycache.__all__
             if inspect.isclass(getattr(raycache, n)) or inspect.isfunction(getattr(raycache, n))}
    bare = []
    for path in sorted(files):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
                    and isinstance(node.value.value, str):
                text = re.sub(r"`[^`]*`", "", node.value.value)
                bare += [f"{path.name}: {m}" for m in re.findall(r"<[a-z_]+>", text)]
    assert not bare, bare

"""The package root and the light fill stages import neither Ray nor torch, so `raycache ls`
starts fast and Ray's read and write workers stay small."""

import subprocess
import sys

import raycache


def test_import_is_light_and_exports_the_sdk():
    code = ("import sys, raycache, raycache._fill.shards, raycache._source.files; "
            "print(sorted(m for m in ('torch', 'ray', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    for name in raycache.__all__:
        assert getattr(raycache, name) is not None
    assert callable(raycache.fill) and callable(raycache.train)


LEFT_INTERNAL = {"Store": "Cache.store and every store= parameter (a Store or a URI)"}
"""Internal types public signatures still name, each with where: the list only shrinks (an
entry that no public signature names any more must go)."""


def leaked_types() -> dict[str, set[str]]:
    """raycache classes outside `__all__` that a public signature, method or field names."""
    import dataclasses
    import inspect
    import re

    from tests.test_docstrings import members, public

    found: dict[str, set[str]] = {}

    def scan(where: str, text: str, module: str) -> None:
        scope = vars(sys.modules[module]) if module in sys.modules else {}
        for word in re.findall(r"[A-Za-z_]\w*", text):
            value = scope.get(word)
            if isinstance(value, type) and value.__module__.startswith("raycache.") \
                    and word not in raycache.__all__ and not issubclass(value, BaseException):
                found.setdefault(word, set()).add(where)

    def signature(func: object) -> str:
        try:
            return str(inspect.signature(func))
        except (TypeError, ValueError):
            return ""

    for name, obj in public():
        module = getattr(obj, "__module__", "raycache")
        if not isinstance(obj, type):
            scan(name, signature(obj), module)
            continue
        scan(name, signature(obj.__init__), module)
        for member, func, _ in members(obj):
            scan(f"{name}.{member}", signature(func), func.__module__)
        for field in dataclasses.fields(obj) if dataclasses.is_dataclass(obj) else ():
            scan(f"{name}.{field.name}", str(field.type), module)
    return found


def test_public_signatures_name_public_types():
    leaked = leaked_types()
    new = {k: sorted(v) for k, v in leaked.items() if k not in LEFT_INTERNAL}
    assert not new, f"internal types in public signatures (export them or keep them off): {new}"
    gone = set(LEFT_INTERNAL) - set(leaked)
    assert not gone, f"no longer leaked, remove from LEFT_INTERNAL: {gone}"


def minor(version: str) -> tuple[int, int]:
    major, minor_, *_ = version.split(".")
    return int(major), int(minor_)


def test_the_version_and_the_old_paths_words_agree():
    """The release pyproject.toml names is the one the notices speak of: the layout internal
    since _moved.SINCE, the old paths gone in _moved.REMOVED_IN (then delete _moved.py)."""
    import tomllib
    from pathlib import Path

    from raycache import _moved

    pyproject = Path(raycache.__file__).parent.parent / "pyproject.toml"
    version = tomllib.loads(pyproject.read_text())["project"]["version"]
    assert minor(_moved.SINCE) <= minor(version) < minor(_moved.REMOVED_IN), (
        f"raycache {version}: the old import paths' notices say since {_moved.SINCE}, gone in "
        f"{_moved.REMOVED_IN}")


ERRORS_FROM_INSIDE = {"test_bad_rows", "test_fill_faults", "test_first_pass", "test_images",
                      "test_reuse", "test_s3", "test_serve", "test_store_faults"}
"""Test files that still import a public error from raycache._errors: a list that only shrinks
(the tests read the errors as users do, from `raycache`)."""


def test_tests_import_public_errors_from_raycache():
    import ast
    from pathlib import Path

    found = set()
    for path in Path(__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "raycache._errors" and any(
                    a.name in raycache.__all__ for a in node.names):
                found.add(path.stem)
    new = found - ERRORS_FROM_INSIDE
    assert not new, f"tests importing a public error from raycache._errors: {sorted(new)}"
    assert not ERRORS_FROM_INSIDE - found, f"done, remove: {ERRORS_FROM_INSIDE - found}"

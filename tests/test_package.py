"""The package root and the light fill stages import neither Ray nor torch, so `raycache ls`
starts fast and Ray's read and write workers stay small."""

import subprocess
import sys

import pytest

import raycache


def test_import_is_light_and_exports_the_sdk():
    code = ("import sys, raycache, raycache._fill.shards, raycache._source.files; "
            "print(sorted(m for m in ('torch', 'ray', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    for name in raycache.__all__:
        assert getattr(raycache, name) is not None
    assert callable(raycache.fill) and callable(raycache.train)


def imported_names(module: str) -> dict[str, str]:
    """The names `module` imports with `from X import name` anywhere in its file (its `if
    TYPE_CHECKING:` blocks and function bodies too), each with the module it names: where an
    annotation's word comes from when it is not in the module's namespace at run time."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return {}
    with open(spec.origin) as f:
        tree = ast.parse(f.read())
    return {a.asname or a.name: node.module for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module for a in node.names}


def internal_type(word: str, module: str) -> str | None:
    """The internal module `word` comes from, as `module`'s annotations name it (its run-time
    namespace, else its imports): None for a public name, a builtin, an error, or a name from
    outside raycache."""
    scope = vars(sys.modules[module]) if module in sys.modules else {}
    value = scope.get(word)
    if value is None:
        origin = imported_names(module).get(word, "")
    elif isinstance(value, type):
        origin = value.__module__
    else:
        return None
    if not origin.startswith("raycache.") or word in raycache.__all__:
        return None
    import importlib

    value = getattr(importlib.import_module(origin), word, None)
    if not isinstance(value, type) or issubclass(value, BaseException):
        return None  # a function's name (`Head.penultimate`), or an error
    return origin


def leaked_types() -> dict[str, set[str]]:
    """raycache types outside `__all__` that a public signature (its parameters and return),
    a public method's or property's, or a public dataclass's field names: each with where."""
    import dataclasses
    import inspect
    import re

    from tests.test_docstrings import members, public

    found: dict[str, set[str]] = {}

    def scan(where: str, text: str, module: str) -> None:
        for word in set(re.findall(r"[A-Za-z_]\w*", text)):
            if origin := internal_type(word, module):
                found.setdefault(f"{origin}.{word}", set()).add(where)

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
    """No internal type in a public signature: every type a public callable, method, property
    or dataclass field names is in `raycache.__all__` (or outside raycache).
    A store is taken as a StoreConfig or a URI and handed out as a ReadOnlyStore."""
    leaked = {k: sorted(v) for k, v in leaked_types().items()}
    assert not leaked, f"internal types in public signatures (export them or keep them off): "\
                       f"{leaked}"


def test_the_signature_walk_sees_what_only_type_checkers_import():
    """The walk reads an annotation's word from the module's `if TYPE_CHECKING:` imports too,
    so a type imported only for annotations still counts."""
    import raycache._source.memory as memory

    assert "Store" not in vars(memory)  # imported for its annotations alone
    assert internal_type("Store", "raycache._source.memory") == "raycache._cache.store"
    assert internal_type("Buffer", "raycache._cache.store") is None  # typing_extensions'
    assert internal_type("StoreConfig", "raycache._cache.config") is None  # public
    assert internal_type("CorruptCache", "raycache._cache.finding") is None  # an error


def test_a_store_is_taken_as_a_uri_a_store_config_or_the_store_a_cache_holds(tmp_path):
    """The public functions take the public types their signatures name: a StoreConfig as a
    URI, and the opened store they hand out (a ReadOnlyStore) back again."""
    from raycache._cache.opened import opened

    config = raycache.StoreConfig(uri=str(tmp_path))
    store = opened(config)
    assert isinstance(store, raycache.ReadOnlyStore) and store.uri == str(tmp_path)
    assert opened(store) is store and opened(str(tmp_path)).uri == store.uri
    for given in (config, str(tmp_path), store):
        assert raycache.ls(given) == [] and raycache.du(given) == []
        assert raycache.gc(given).removed == []
    with pytest.raises(raycache.CacheNotFound, match="no committed cache named 'docs'"):
        raycache.open_cache("docs", config)


def minor(version: str) -> tuple[int, int]:
    major, minor_, *_ = version.split(".")
    return int(major), int(minor_)


def test_the_version_and_the_old_paths_words_agree():
    """The release pyproject.toml names is the one the notices speak of: the layout internal
    since _moved.SINCE, the old paths gone in _moved.REMOVED_IN (then delete _moved.py), and
    the renamed settings' notices (raycache._core.renamed) saying the same."""
    import tomllib
    from pathlib import Path

    from raycache import _moved

    pyproject = Path(raycache.__file__).parent.parent / "pyproject.toml"
    version = tomllib.loads(pyproject.read_text())["project"]["version"]
    assert minor(_moved.SINCE) <= minor(version) < minor(_moved.REMOVED_IN), (
        f"raycache {version}: the old import paths' notices say since {_moved.SINCE}, gone in "
        f"{_moved.REMOVED_IN}")
    from raycache._core import renamed  # renamed settings and keywords: the same words

    assert (renamed.SINCE, renamed.REMOVED_IN) == (_moved.SINCE, _moved.REMOVED_IN)




def test_tests_import_public_errors_from_raycache():
    import ast
    from pathlib import Path

    found = set()
    for path in Path(__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "raycache._errors" and any(
                    a.name in raycache.__all__ for a in node.names):
                found.add(path.stem)
    assert not found, f"tests importing a public error from raycache._errors: {sorted(found)}"

"""The package's layout rules, read from the code with `ast`: no import circle between modules,
and no stage importing from a stage above it (the order in ARCHITECTURE.md)."""

import ast
from pathlib import Path

import raycache

ROOT = Path(raycache.__file__).parent
LAYERS = ["_errors", "_core", "_source", "_cache", "_encoders", "_compute", "_fill", "_heads",
          "_fit", "_train", "_probe", "_predict", "_upkeep", "_export", "_serve", "public"]
"""Bottom to top: a module may import from its own layer and those below it."""
PUBLIC = {"__init__", "__main__", "_cli", "_pipeline", "_moved"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in PUBLIC:
        return "public"
    return parts[1]


def imports() -> dict[str, set[str]]:
    """Every raycache module and the raycache modules it imports, at any depth of the code
    (function-local imports included, `if TYPE_CHECKING:` blocks left out)."""
    modules = {module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
        out = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                base = node.module
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    out.add(full if full in modules else base)
            elif isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
        graph[name] = {m for m in out if m in modules and m != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_find_cycle_finds_a_circle_and_passes_a_tree():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_circle_between_modules():
    graph = imports()
    assert len(graph) > 40  # the walk found the package
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_no_stage_imports_from_a_stage_above_it():
    graph = imports()
    upward = sorted(f"{a} ({layer(a)}) -> {b} ({layer(b)})"
                    for a, targets in graph.items() for b in targets
                    if LAYERS.index(layer(b)) > LAYERS.index(layer(a)))
    assert not upward, "imports that run back up:\n" + "\n".join(upward)


ROOT_FILES = {"__init__", "__main__", "_errors", "_moved", "_pipeline"}
"""The package root's modules: the public face and the errors; the command line is one room,
raycache/_cli/."""


def in_cli(module: str) -> bool:
    return module == "raycache._cli" or module.startswith("raycache._cli.")


def test_the_command_line_is_one_room_that_nothing_below_imports():
    assert {p.stem for p in ROOT.glob("*.py")} == ROOT_FILES
    graph = imports()
    assert sum(map(in_cli, graph)) > 10  # the walk found the command line's modules
    into = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                  if in_cli(b) and not in_cli(a) and a != "raycache.__main__")
    assert not into, "imports of the command line from below it:\n" + "\n".join(into)


def test_every_module_says_its_job_and_stays_small():
    for path in ROOT.rglob("*.py"):
        tree = ast.parse(path.read_text())
        assert ast.get_docstring(tree), f"{path.relative_to(ROOT)}: no module docstring"
        lines = len(path.read_text().splitlines())
        assert lines <= 420, f"{path.relative_to(ROOT)}: {lines} lines (split it by job)"


TRAIN_ROOMS = ["shared", "worker", "driver"]
"""Inside _train, bottom to top: what both sides share (configs, the WorkerSpec, data/,
objectives/, sweep/), what runs in each worker, what runs on the driver."""


def train_room(module: str) -> str:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[2] in TRAIN_ROOMS else "shared"


def test_training_code_is_placed_by_where_it_runs():
    graph = imports()
    train = {m: t for m, t in graph.items() if m.startswith("raycache._train.")}
    assert any(train_room(m) == "worker" for m in train)
    assert any(train_room(m) == "driver" for m in train)
    upward = sorted(f"{a} -> {b}" for a, targets in train.items() for b in targets
                    if b.startswith("raycache._train.")
                    and TRAIN_ROOMS.index(train_room(b)) > TRAIN_ROOMS.index(train_room(a)))
    assert not upward, "training imports that run back up:\n" + "\n".join(upward)



ENTRY_FIELDS = {"home", "keep", "stored"}
"""Format 5's fields of a shard entry: where its file lives and which of its rows a version
reads. Only `_cache/` reads or sets them; the rest asks raycache._cache.entry_rows (no other
`.keep` is left: predict's copied columns are its `passthrough`)."""


def entry_format_uses(source: str, module: str) -> list[str]:
    """Where a module (`module`: its path under raycache, dotted) reads or sets a shard entry's
    home or kept rows itself: an attribute `.home`/`.keep`/`.stored`, a `replace(...)` or
    `ShardEntry(...)` given one, or an import of the selection's codec."""
    out = []
    for node in ast.walk(ast.parse(source)):
        where = f"{module}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Attribute) and node.attr in ENTRY_FIELDS:
            out.append(f"{where} .{node.attr}")
        elif isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in {
                "replace", "ShardEntry"}:
            out += [f"{where} {k.arg}=" for k in node.keywords if k.arg in ENTRY_FIELDS]
        elif isinstance(node, ast.ImportFrom) and node.module == "raycache._cache.selection":
            out.append(f"{where} imports raycache._cache.selection")
    return out


def test_only_the_cache_follows_an_entrys_home_or_decodes_its_kept_rows():
    sites = []
    for path in sorted(ROOT.rglob("*.py")):
        module = module_name(path).removeprefix("raycache.")
        if module.split(".")[0] != "_cache":
            sites += entry_format_uses(path.read_text(), module)
    assert not sites, ("code outside raycache/_cache/ that reads a shard entry's home or kept "
                       "rows itself (ask raycache._cache.entry_rows):\n" + "\n".join(sites))


def test_the_entry_check_finds_each_way_back():
    source = ("from raycache._cache.selection import decode\nx = e.home\n"
              "y = dataclasses.replace(e, keep='')\nz = e.stored\nw = cfg.keep\n")
    found = sorted(use.split(" ", 1)[1] for use in entry_format_uses(source, "_fill.x"))
    assert found == [".home", ".keep", ".stored", "imports raycache._cache.selection", "keep="]
    assert ".keep" in " ".join(entry_format_uses(source, "_predict.run"))  # no module excused


PROBE_TO_TRAINING: set[str] = set()
"""What the probe may import of training: nothing. raycache.probe hands the training driver in
(raycache._probe.training.Training); what both share lies below them in raycache/_fit/."""


def training_imports(source: str) -> list[str]:
    """Every raycache._train module `source` imports: at any depth, `if TYPE_CHECKING:` blocks
    and import_module("...") calls included."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in {
                "import_module", "__import__"} and node.args \
                and isinstance(node.args[0], ast.Constant):
            out.append(str(node.args[0].value))
    return sorted(m for m in out if (m == "raycache._train" or m.startswith("raycache._train."))
                  and m not in PROBE_TO_TRAINING)


def test_training_imports_finds_every_form_of_import():
    source = ("from typing import TYPE_CHECKING\nimport raycache._train.optim\n"
              "from raycache._fit import split\nif TYPE_CHECKING:\n"
              "    from raycache._train.config import TrainConfig\n"
              "def f():\n    from raycache._train.driver.run import train_on\n"
              "    importlib.import_module('raycache._train.driver.plan')\n")
    assert training_imports(source) == ["raycache._train.config", "raycache._train.driver.plan",
                                         "raycache._train.driver.run", "raycache._train.optim"]


def test_the_probe_imports_nothing_of_training():
    files = sorted((ROOT / "_probe").rglob("*.py"))
    assert len(files) > 10  # the walk found the probe
    found = [f"{p.relative_to(ROOT)}: {m}" for p in files for m in training_imports(p.read_text())]
    assert not found, "the probe imports training:\n" + "\n".join(found)

"""Extras that match features: every optional package raycache imports is in EXTRAS and in the
extra it names, and a feature whose package is missing refuses naming that extra (no crash)."""

import ast
import sys
import tomllib
from pathlib import Path

import pytest

from raycache import ConfigError, MissingExtra
from raycache._cli import main
from raycache._core.extras import EXTRAS, lacking, need

ROOT = Path(__file__).resolve().parents[1]
LIGHT = {"torch", "pyarrow", "fsspec", "s3fs", "transformers", "safetensors", "yaml", "rich",
         "numpy", "huggingface_hub", "tokenizers", "argcomplete"}
"""What the light install brings (its dependencies and theirs raycache imports)."""


def extras() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]


def imported_tops() -> set[str]:
    """The top-level packages raycache's own modules import (function-local ones included)."""
    tops = set()
    for path in (ROOT / "raycache").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                tops |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops.add(node.module.split(".")[0])
    return tops - set(sys.stdlib_module_names) - {"raycache"}


def test_every_optional_import_is_named_in_extras_and_its_extra_holds_it():
    declared = extras()
    for module, (package, extra) in EXTRAS.items():
        held = " ".join(declared[extra])
        assert package.split("[")[0] in held, (module, extra, held)
    assert set(declared["all"][0].split("[")[1].rstrip("]").split(",")) == set(declared) - {
        "all", "test", "docs"}
    optional = {m.split(".")[0] for m in EXTRAS}
    # what else raycache imports comes with the light install or with one of those packages
    rest = imported_tops() - optional - LIGHT
    assert rest <= set(BROUGHT), rest


BROUGHT = {"pandas": "ray", "psutil": "ray", "pytorch_metric_learning": "ray",
           "tensorboardX": "ray (ray[train])", "starlette": "serve (ray[serve])",
           "fastapi": "serve (ray[serve])", "prometheus_client": "ray (ray[default])",
           "scipy": "lexical (scikit-learn)", "typing_extensions": "the light install (torch)",
           "tqdm": "the light install (transformers)"}
"""What raycache imports that no EXTRAS entry names, and the install that brings it."""


def test_the_light_install_holds_no_ray():
    deps = " ".join(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "dependencies"])
    assert "ray" not in deps.replace("pyarrow", "")
    assert any(d.startswith("ray[data,train") for d in extras()["ray"])


def test_need_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    with pytest.raises(MissingExtra, match=r"the plot needs matplotlib.*'raycache\[plots\]'") as e:
        need("matplotlib", "the plot")
    assert e.value.extra == "plots" and isinstance(e.value, ImportError)
    assert "raycache[plots]" in lacking("matplotlib", "x")[0]
    assert lacking("ray", "x") == []  # installed here
    monkeypatch.setitem(sys.modules, "ray", None)
    monkeypatch.setitem(sys.modules, "ray.serve", None)  # as if never imported by an earlier test
    assert "raycache[serve]" in lacking("ray.serve", "serving")[0]


def test_evaluate_output_without_matplotlib_refuses_with_exit_3(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code = main(["evaluate", "--checkpoint", str(tmp_path / "head"), "--input",
                 str(tmp_path / "rows.jsonl"), "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 3, err
    assert "confusion.png" in err and "pip install 'raycache[plots]'" in err
    assert not (tmp_path / "out").exists()


def test_probe_report_and_lexical_without_their_packages_are_config_problems(monkeypatch):
    from raycache._pipeline import TRAINING
    from raycache._probe.plan import load_config

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "sklearn", None)
    with pytest.raises(ConfigError) as e:
        load_config({"caches": ["docs"], "lexical": True}, TRAINING)
    assert any("raycache[plots]" in p and "report: false" in p for p in e.value.problems)
    assert any("raycache[lexical]" in p for p in e.value.problems)
    load_config({"caches": ["docs"], "report": False}, TRAINING)  # nothing else needs either


def test_lance_and_qdrant_exports_name_the_export_extra(monkeypatch, tmp_path):
    from raycache._export import lance, qdrant

    monkeypatch.setitem(sys.modules, "lance", None)
    monkeypatch.setitem(sys.modules, "qdrant_client", None)
    assert "raycache[export]" in lance.check(str(tmp_path / "x.lance"), {}, False)[0]
    assert "raycache[export]" in qdrant.check(":memory:", {}, False)[0]


def test_an_optional_package_missing_its_own_dependency_names_the_extra(monkeypatch,
                                                                        tmp_path):
    """ray.serve is in every Ray install; what ray[serve] adds (fastapi, starlette) may not be."""
    (tmp_path / "halfpkg.py").write_text("import no_such_dependency_of_halfpkg\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(EXTRAS, "halfpkg", ("ray[serve]", "serve"))
    with pytest.raises(MissingExtra, match=r"serving a head needs ray\[serve\].*'raycache\[serve\]'"
                                           r".*no module named 'no_such_dependency_of_halfpkg'"):
        need("halfpkg", "serving a head")

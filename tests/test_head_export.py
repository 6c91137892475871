"""A head's files and its ways out: weights saved as safetensors (an older head.pt still loads),
an export to a sentence-transformers folder whose outputs equal Head.predict's, and inference
that imports neither Ray Data nor Ray Train."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import raycache
from raycache import RaycacheError
from raycache._cli import main
from tests.conftest import ROOT

TEXTS = ["Return the sine of y.", "Open the file notes.txt for reading.",
         "Send an HTTP request to example.com.", "Compute the square root of 2.",
         "List the files under /var/log.", "Resolve the host localhost.",
         "Round the number down.", "Close the connection to the database."]


def test_heads_are_saved_as_safetensors_and_an_old_head_pt_still_loads(minilm_heads, tmp_path):
    ckpt = Path(minilm_heads["linear"])
    assert (ckpt / "head.safetensors").is_file() and not (ckpt / "head.pt").exists()
    head = raycache.load_head(str(ckpt))
    expected = head.predict(TEXTS)
    assert set(expected) <= {"math", "files", "network"}

    old = tmp_path / "old"  # the folder an older raycache wrote: head.pt, a torch pickle
    old.mkdir()
    (old / "head.json").write_bytes((ckpt / "head.json").read_bytes())
    torch.save(load_file(ckpt / "head.safetensors"), old / "head.pt")
    again = raycache.load_head(str(old))
    assert list(again.predict(TEXTS)) == list(expected)
    for k, v in head.model.state_dict().items():
        assert torch.equal(again.model.state_dict()[k], v)

    (old / "head.pt").write_bytes(b"not a pickle")
    with pytest.raises(RaycacheError, match=r"(?s)old' is unreadable .*head.pt must be"):
        raycache.load_head(str(old))
    (old / "head.pt").unlink()
    with pytest.raises(RaycacheError, match=r"is not a head checkpoint .*head.safetensors"):
        raycache.load_head(str(old))


@pytest.mark.parametrize("family", ["linear", "mlp"])
def test_sentence_transformers_export_equals_head_predict(minilm_heads, tmp_path, family):
    from sentence_transformers import SentenceTransformer

    head = raycache.load_head(minilm_heads[family])
    # an mlp standardises its inputs: the export folds that into its first Dense
    assert head.spec.standardize == (family == "mlp")
    folder = raycache.export_head(minilm_heads[family], str(tmp_path / "st"))
    about = json.loads((Path(folder) / "config_sentence_transformers.json").read_text())
    assert about["raycache"]["classes"] == list(head.spec.class_names)
    assert about["raycache"]["label"] == "topic" and about["raycache"]["precision"] == "float32"
    assert sorted(about["raycache"]["classes"]) == ["files", "math", "network"]

    model = SentenceTransformer(folder, device="cpu")
    out = model.encode(TEXTS, convert_to_numpy=True)
    logits = head.logits(head.features(TEXTS))
    np.testing.assert_allclose(out, logits, atol=1e-4)
    names = np.array(about["raycache"]["classes"])[out.argmax(1)]
    assert list(names) == list(head.predict(TEXTS))
    if family == "mlp":
        modules = json.loads((Path(folder) / "modules.json").read_text())
        assert [m["type"].rsplit(".", 1)[-1] for m in modules] == [
            "Transformer", "Pooling", "Normalize", "Dense", "Dense"]


def test_export_head_cli_and_its_refusals(minilm_heads, tmp_path, capsys):
    out = tmp_path / "cli"
    assert main(["export-head", "--checkpoint", minilm_heads["linear"], "--output",
                 str(out)]) == 0
    assert "sentence-transformers folder" in capsys.readouterr().out
    assert (out / "modules.json").is_file() and (out / "3_Dense" / "model.safetensors").is_file()
    assert main(["export-head", "--checkpoint", minilm_heads["linear"], "--output",
                 str(out)]) == 3
    assert "exists; pass overwrite=True (CLI: --overwrite)" in capsys.readouterr().err
    assert main(["export-head", "--checkpoint", minilm_heads["linear"], "--output",
                 str(out), "--overwrite"]) == 0


def test_heads_it_cannot_write_are_refused_naming_why(minilm_heads, tmp_path,
                                                      separable_source):
    stacked = raycache.train({"cache": "docs", "store": {"uri": minilm_heads["store"]},
                              "num_workers": 0, "progress": False, "label": "topic",
                              "epochs": 1, "head": "stacked", "hidden": [8]})
    with pytest.raises(RaycacheError, match=r"family 'stacked' has a LayerNorm layer.*linear, "
                                            r"mlp or widening"):
        raycache.export_head(stacked.checkpoint, str(tmp_path / "x"))
    from tests.conftest import toy_fill

    store = str(tmp_path / "store")
    raycache.fill(toy_fill(str(separable_source), store, in_process=True))
    run = raycache.train({"cache": "toy", "store": {"uri": store}, "num_workers": 0,
                          "progress": False, "epochs": 1})
    with pytest.raises(RaycacheError, match=r"reads encoders \['proj \(torch\)'\]"):
        raycache.export_head(run.checkpoint, str(tmp_path / "x"))
    assert not (tmp_path / "x").exists()


INFERENCE_ONLY = """
import importlib.util, json, sys
import raycache
head = raycache.load_head(sys.argv[1])
labels = list(head.predict(["Open a file.", "Return the cosine of x."]))
from sentence_transformers import SentenceTransformer
st = SentenceTransformer(raycache.export_head(sys.argv[1], sys.argv[2]), device="cpu")
print(json.dumps({"labels": labels, "st": st.encode(["Open a file."]).shape[1],
                  "ray_installed": importlib.util.find_spec("ray") is not None,
                  "ray_loaded": sorted(m for m in sys.modules if m.split(".")[0] == "ray")}))
"""


def venv_without_ray(root: Path) -> Path:
    """A fresh venv whose site-packages are this one's minus Ray (links to each package, by a
    .pth file): Ray is not installed there, so `import ray` fails."""
    import site
    import venv

    venv.EnvBuilder(with_pip=False).create(root / "venv")
    shared = Path(next(p for p in site.getsitepackages() if p.endswith("site-packages")))
    linked = root / "linked"
    linked.mkdir()
    for entry in shared.iterdir():
        if entry.name == "ray" or entry.name.startswith(("ray-", "ray_")) \
                or entry.suffix == ".pth":
            continue
        (linked / entry.name).symlink_to(entry)
    inner = next((root / "venv" / "lib").glob("python3*/site-packages"))
    (inner / "shared.pth").write_text(f"{linked}\n")
    return root / "venv" / "bin" / "python"


@pytest.mark.timeout(600)
def test_inference_runs_in_a_venv_without_ray(minilm_heads, tmp_path):
    """load_head, Head.predict and the exported folder, where Ray is not installed at all."""
    python = venv_without_ray(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([str(python), "-c", INFERENCE_ONLY, minilm_heads["linear"],
                           str(tmp_path / "st")], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["ray_installed"] is False and got["ray_loaded"] == []
    expected = raycache.load_head(minilm_heads["linear"]).predict(["Open a file.",
                                                                  "Return the cosine of x."])
    assert got["labels"] == list(expected) and got["st"] == 3


def test_load_head_and_predict_import_no_ray_where_it_is_installed(minilm_heads, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", INFERENCE_ONLY, minilm_heads["linear"],
                           str(tmp_path / "st")], capture_output=True, text=True, env=env,
                          timeout=300, check=True)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["ray_installed"] is True and len(got["labels"]) == 2
    assert got["ray_loaded"] == []  # neither Ray Data nor Ray Train: no Ray at all

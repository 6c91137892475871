"""examples/quickstart.ipynb runs top to bottom in a fresh kernel and shows what it promises.

The kernel is a separate process with its own in-process Ray, so it does not share (or clash
with) a Ray the pytest process may already run for other tests.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from raycache.demo_data import TOPICS

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"
KERNEL = "python3"

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]


def kernel_env(store: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)  # the kernel starts its own Ray, never joins the test's one
    env.pop("MPLBACKEND", None)  # keep ipykernel's inline backend, which emits image/png
    env.update(RAYCACHE_QUICKSTART_STORE=str(store), HF_HUB_OFFLINE="1")
    # Ray's OpenTelemetry metrics thread once segfaulted the kernel (the driver) mid-fill
    # (TemporalMetricStorage::buildMetrics, Ray 2.60); the notebook needs no Ray metrics.
    env.setdefault("RAY_enable_metrics_collection", "0")
    return env


def text_of(output) -> str:
    if output.output_type == "stream":
        return output.text
    data = output.get("data", {})
    return data.get("text/plain", "") + data.get("text/html", "")


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory):
    import nbformat
    from jupyter_client import KernelManager
    from nbclient import NotebookClient

    cmd = KernelManager(kernel_name=KERNEL).format_kernel_cmd()
    assert cmd[0] == sys.executable, f"kernel {KERNEL!r} would run {cmd[0]}, not {sys.executable}"
    work = tmp_path_factory.mktemp("quickstart")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        nb, timeout=600, kernel_name=KERNEL, resources={"metadata": {"path": str(work)}}
    )
    client.execute(env=kernel_env(work / "store"))
    return nb, work


def outputs(nb, marker: str) -> list:
    """The outputs of the one code cell whose source contains `marker`."""
    cells = [c for c in nb.cells if c.cell_type == "code" and marker in c.source]
    assert len(cells) == 1, f"expected one code cell with {marker!r}, found {len(cells)}"
    return cells[0].outputs


def printed(nb, marker: str) -> str:
    """What the cell printed to stdout (stderr carries Ray and transformers logs)."""
    return "".join(
        o.text for o in outputs(nb, marker) if o.output_type == "stream" and o.name == "stdout"
    )


def test_notebook_is_stored_without_outputs():
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == KERNEL
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


def test_quickstart_runs(executed):
    nb, work = executed
    errors = [
        o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"
    ]
    assert not errors, errors

    fill = printed(nb, "raycache.fill(")
    assert re.search(r"fill stdlib-docs/\w+: miss, 150 rows \(150 encoded\), \d+ shards",
                     fill), fill
    assert (work / "store" / "stdlib-docs").is_dir()

    cache_repr = "".join(text_of(o) for o in outputs(nb, "raycache.open_cache("))
    assert "<b>raycache</b> stdlib-docs/" in cache_repr and "150 rows" in cache_repr
    encoders = "".join(text_of(o) for o in outputs(nb, "cache.manifest.encoders"))
    assert "name='minilm'" in encoders and "dim=384" in encoders

    frame = [o for o in outputs(nb, "cache.to_pandas(") if o.output_type == "execute_result"]
    assert frame and "text/html" in frame[0].data
    assert "minilm" in frame[0].data["text/plain"] and "label" in frame[0].data["text/plain"]

    trained = printed(nb, "raycache.train(")
    match = re.search(
        r"train linear on stdlib-docs/\w+: 15 epochs, 2 workers, val_acc ([\d.]+)", trained
    )
    assert match, trained
    assert float(match.group(1)) > 0.4, trained  # 6 topics: chance is about 0.17

    plot = outputs(nb, "history_frame()")
    assert any("image/png" in o.get("data", {}) for o in plot), plot

    predictions = printed(nb, "head.predict(").splitlines()
    assert len(predictions) == 2, predictions
    assert predictions[0].split()[0] == "math", predictions
    assert all(line.split()[0] in TOPICS for line in predictions), predictions

"""A quiet console by default: `raycache fill` on a running cluster prints its progress and
summary, none of Ray's own lines (they show with verbose: true); a notebook that imports
raycache shows no notices about widgets it does not use."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from tests.conftest import ROOT, toy_fill

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

RAY_LINES = (
    # Ray Core's "... has constructor arguments in the object store and max_restarts > 0" line
    # stays: Ray Data passes every actor pool its arguments that way, and only max_restarts=0
    # silences it (a dead actor then hung a fill in Ray Data 2.60 instead of failing it)
    "Reporting training result",  # Ray Train's report dumps
    "TrainingReport(",
    "(autoscaler",  # the autoscaler's events
    "RAY_SCHEDULER_EVENTS",
    "IProgress not found",  # tqdm.auto without ipywidgets
    "Missing packages",  # Ray's notebook reprs without ipywidgets
)


def test_a_fill_through_the_cli_prints_no_ray_lines(ray_session, separable_source, tmp_path):
    path = tmp_path / "fill.yaml"
    path.write_text(yaml.safe_dump(toy_fill(str(separable_source), str(tmp_path / "store"))))
    env = {**os.environ, "RAY_ADDRESS": ray_session.get_runtime_context().gcs_address}
    done = subprocess.run([sys.executable, "-m", "raycache", "fill", "--config", str(path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "miss, 600 rows (600 encoded, 0 reused), 4 shards" in done.stdout, out
    for line in RAY_LINES:
        assert line not in out, f"{line!r} printed:\n{out}"


def test_a_notebook_shows_no_widget_notices(tmp_path):
    """In a kernel without ipywidgets: no tqdm "IProgress not found", no Ray "Missing
    packages: ['ipywidgets']" (as Ray's modules are imported), once raycache is imported."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(code) for code in (
        "import raycache",
        "import ray.data\nimport ray.train.torch\nimport tqdm.auto\nprint('imported')",
    )]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute(env=env)
    shown = "".join(o.get("text", "") + str(o.get("data", {}))
                    for cell in nb.cells for o in cell.outputs)
    assert "imported" in shown
    for line in ("IProgress not found", "Missing packages", "ipywidgets"):
        assert line not in shown, shown

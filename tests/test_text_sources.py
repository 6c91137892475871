"""CSV and JSONL sources plan their rows like Parquet: each file's rows counted by a parse (not
by lines: a quoted CSV field may hold newlines), so a small text fill runs in-process, shows a
progress total, and its commit checks every row is covered."""

import json

import pytest

from raycache._source.config import SourceConfig
from raycache._source.files import Span, list_files, plan_units
from tests.conftest import fill_in_fresh_process

pytestmark = pytest.mark.timeout(240)

CSV = 'id,text,label\n1,"two\nlines",0\n2,plain,1\n3,"a ""quoted"" word",0\n'


def test_text_files_are_counted_by_a_parse_and_done_rows_skipped(tmp_path):
    (tmp_path / "a.csv").write_text(CSV)
    fmt, files = list_files(SourceConfig(path=str(tmp_path / "a.csv"), key="id"))
    units, totals = plan_units(files, fmt, {}, 1024, key="id")
    assert totals == {files[0].block: 3} and CSV.count("\n") - 1 == 4  # 3 rows in 4 lines
    assert [(u.rows, u.todo()) for u in units] == [(3, 3)]
    half, _ = plan_units(files, fmt, {}, 1024, {files[0].block: (Span(0, 2),)}, key="id")
    assert [u.todo() for u in half] == [1]
    done, totals = plan_units(files, fmt, {}, 1024, {files[0].block: (Span(0, 3),)}, key="id")
    assert done == [] and totals == {files[0].block: 3}  # nothing left to read

    rows = [{"id": i, "text": f"t{i}", "label": i % 2} for i in range(5)]
    lines = [json.dumps(r) for r in rows]  # a blank line, and none after the last row
    (tmp_path / "b.jsonl").write_text("\n".join(lines[:2] + ["  "] + lines[2:]))
    fmt, files = list_files(SourceConfig(path=str(tmp_path / "b.jsonl"), key="id"))
    assert plan_units(files, fmt, {}, 1024, key="id")[1] == {files[0].block: 5}


def test_a_small_jsonl_fill_runs_in_process_with_no_ray(tmp_path):
    import numpy as np

    feats = np.random.default_rng(0).normal(size=(300, 8)).round(4).tolist()
    (tmp_path / "d.jsonl").write_text("".join(
        json.dumps({"id": i, "features": f, "label": i % 3}) + "\n" for i, f in enumerate(feats)))
    cfg = {"name": "t", "source": {"path": str(tmp_path / "d.jsonl"), "labels": ["label"]},
           "encoders": [{"name": "proj", "kind": "torch", "input": "features",
                         "factory": "toy_encoders:projection",
                         "kwargs": {"in_dim": 8, "out_dim": 16}}],
           "store": {"uri": str(tmp_path / "store")}, "progress": False}
    got = fill_in_fresh_process(cfg, timeout=200)
    pool, rows, ray_started = got["pool"], got["rows"], got["ray_started"]
    assert pool.startswith("in-process") and rows == 300 and not ray_started

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


def test_a_fills_listing_resolves_its_sources_secrets_once(tmp_path, monkeypatch):
    """The fill's steps over its listed files (plan's schema checks, the row counts, the reads
    and the check before commit) use the options the listing resolved: the source's secrets are
    revealed once, not once per file, open and check."""
    import sys

    from raycache._core import secrets
    from raycache._fill.plan import load_config
    from raycache._source.files import check_unchanged, read_schemas, read_unit
    from tests.conftest import toy_fill

    for name in ("a", "b"):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(
            {"id": f"{name}{i}", "features": [0.5] * 8, "label": i % 2}) + "\n" for i in range(6)))
    cfg = toy_fill(str(tmp_path / "*.jsonl"), str(tmp_path / "store"))
    cfg["source"] = {"path": str(tmp_path / "*.jsonl"), "key": "id", "labels": ["label"],
                     "options": {"token": "hush"}}
    cfg = load_config(cfg)
    calls, original, inside = [], secrets.reveal, []

    def counted(options):  # the outermost call only: reveal walks nested options by itself
        calls.extend([] if inside else [options])
        inside.append(1)
        try:
            return original(options)
        finally:
            inside.pop()

    for name, module in list(sys.modules.items()):  # where a source module holds its own name
        if name.startswith("raycache._source") and getattr(module, "reveal", None) is original:
            monkeypatch.setattr(module, "reveal", counted)
    monkeypatch.setattr(secrets, "reveal", counted)
    monkeypatch.setattr("fsspec.core.url_to_fs", _local_only(__import__("fsspec").core.url_to_fs))
    monkeypatch.setattr("fsspec.open", _local_only(__import__("fsspec").open))
    options = cfg.source.options  # as the fill's plan, encode and commit hand them on
    fmt, files = list_files(cfg.source)
    read_schemas(files, fmt, options)
    units, _ = plan_units(files, fmt, options, 4, key="id")
    rows = sum(t.num_rows for u in units
               for t in read_unit(u, fmt, options, 4, ["id", "features"]))
    check_unchanged(files, options, "nothing was committed")
    assert len(files) == 2 and rows == 12
    assert len(calls) == 1, f"the source's options revealed {len(calls)} times in one listing"


def _local_only(fsspec_call):
    """An fsspec entry point that drops a token the local filesystem has no use for."""
    def call(*args, **options):
        options.pop("token", None)
        return fsspec_call(*args, **options)

    return call

"""A fill on Ray shows progress before its first whole block is encoded (issue 53): the first
block runs first, in small pieces, each a model call whose shard reaches the driver's bar."""

import pyarrow.parquet as pq
import pytest

import raycache
from raycache._compute import runner
from raycache._fill.encode import RAMP_ROWS
from raycache._source import files as sources
from tests.conftest import separable, toy_fill

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]


def test_a_ray_fills_bar_moves_before_its_first_block_is_encoded(ray_session, tmp_path,
                                                                  monkeypatch):
    (tmp_path / "src").mkdir()
    pq.write_table(separable(n=4096), tmp_path / "src" / "a.parquet", row_group_size=4096)
    updates: list[int] = []

    class Bar:
        def update(self, rows: int) -> None:
            updates.append(rows)

    monkeypatch.setattr(runner, "progress_bar", lambda *a, **k: _held(Bar()))
    cfg = toy_fill(str(tmp_path / "src"), str(tmp_path / "store"), in_process=False,
                   rows_per_shard=2048, pool={"block_rows": 2048, "concurrency": 1})
    done = raycache.fill(cfg)
    assert "task(s)" in done.pool  # on Ray, not in this process
    # rows encoded and written, and on the bar, before a whole block of them
    assert max(updates[:4]) < 2048 and sorted(updates[:4]) == [RAMP_ROWS, RAMP_ROWS, 512, 1024]
    assert updates[4:] == [2048]
    sizes = [s.rows for s in sorted(done.cache.manifest.shards, key=lambda s: s.ranges[0].start)]
    assert sizes == [RAMP_ROWS, RAMP_ROWS, 512, 1024, 2048]  # as the in-process fill cuts
    assert len(set(done.cache.to_pandas()["id"])) == 4096 == done.cache.manifest.rows


def _held(bar):
    import contextlib

    return contextlib.nullcontext(bar)


def test_a_units_first_rows_cut_into_pieces_skip_what_is_done():
    unit = sources.Unit(sources.SourceFile("a", 1, "v"), (0,), 1000, 5000,
                        (sources.Span(0, 1100), sources.Span(1200, 1300)))
    pieces, rest = unit.cut([256, 256])
    assert [p.todo() for p in pieces] == [256, 256] and rest.todo() == 5000 - 200 - 512
    assert pieces[0].done == (sources.Span(0, 1100), sources.Span(1200, 1300),
                              sources.Span(1456, 6000))
    assert rest.done == (sources.Span(0, 1712),)
    small = sources.Unit(sources.SourceFile("a", 1, "v"), (0,), 0, 300)
    pieces, rest = small.cut([256, 256])
    assert [p.todo() for p in pieces] == [256, 44] and rest is None

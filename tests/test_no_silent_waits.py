"""Nothing waits in silence (issue 53): a fill's first block comes in small pieces, evaluate
shows its encoding and the probe each step as a line in a pipe, predict's rate leaves the
model's load out. In-process: no Ray."""

import pyarrow.parquet as pq
import pytest

import raycache
from raycache._fill.encode import RAMP_ROWS
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(300)


def test_a_fills_first_block_comes_in_small_pieces(tmp_path):
    (tmp_path / "src").mkdir()
    pq.write_table(separable(n=4096), tmp_path / "src" / "a.parquet")
    cfg = toy_fill(str(tmp_path / "src"), str(tmp_path / "store"), in_process=True,
                   rows_per_shard=2048, block_rows=2048)
    done = raycache.fill(cfg)
    sizes = [s.rows for s in sorted(done.cache.manifest.shards,
                                    key=lambda s: s.ranges[0].start)]
    assert sizes == [RAMP_ROWS, RAMP_ROWS, 512, 1024, 2048]  # the first shard early, then whole
    assert done.cache.manifest.rows == 4096
    assert len(set(done.cache.to_pandas()["id"])) == 4096


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("silent")
    (root / "src").mkdir()
    pq.write_table(separable(n=200), root / "src" / "a.parquet")
    raycache.fill(toy_fill(str(root / "src"), str(root / "store"), in_process=True))
    run = raycache.train({"cache": "toy", "store": {"uri": str(root / "store")},
                          "num_workers": 0, "progress": False})
    return root, run


def test_evaluate_shows_its_encoding_a_line_a_batch_in_a_pipe(trained, capsys, monkeypatch):
    from raycache._predict import evaluate as module

    root, run = trained
    pq.write_table(separable(n=50, seed=3), root / "labelled.parquet")
    monkeypatch.setattr(module, "BATCH_ROWS", 20)
    raycache.evaluate(run.checkpoint, str(root / "labelled.parquet"))
    err = capsys.readouterr().err.splitlines()
    lines = [line for line in err if line.startswith("evaluate: encoding: ")]
    assert lines[0].startswith("evaluate: encoding: 20/50 rows in ")
    assert lines[0].endswith("s (with the model's load)")  # its time, not a rate
    assert lines[1].startswith("evaluate: encoding: 40/50 rows, ") and lines[1].endswith(
        " rows/s")
    assert lines[2].startswith("evaluate: encoding: 50/50 rows, ")
    raycache.evaluate(run.checkpoint, str(root / "labelled.parquet"), progress=False)
    assert "evaluate: encoding" not in capsys.readouterr().err


def test_the_probe_says_each_step_as_it_starts(trained, capsys):
    root, _ = trained
    raycache.probe({"caches": ["toy"], "store": {"uri": str(root / "store")}, "label": "name",
                    "methods": ["logreg"], "report": False, "num_workers": 0,
                    "logreg": {"C": [1.0]}, "lexical": False})
    out = capsys.readouterr().out.splitlines()
    reading = out.index("probe: reading the features of 1 encoder(s) ...")
    starts = next(i for i, line in enumerate(out)
                  if line.startswith("probe proj logreg: ") and line.endswith("rows ..."))
    done = next(i for i, line in enumerate(out)
                if line.startswith("probe proj logreg (C=") and "acc" in line)
    assert reading < starts < done


def test_predicts_rate_leaves_the_models_load_out(trained, tmp_path):
    from raycache._predict.run import PredictResult

    root, run = trained
    pq.write_table(separable(n=6).select(["id", "features"]), tmp_path / "six.parquet")
    result = raycache.predict_file({"checkpoint": run.checkpoint,
                                    "input": str(tmp_path / "six.parquet"),
                                    "output": str(tmp_path / "out.parquet"),
                                    "in_process": True, "progress": False})
    assert result.rows == 6 and result.rows_per_second is None  # one batch: no rate to give
    assert "the model's load and start-up included" in result.summary()
    assert "rows/s" not in result.summary()
    steady = PredictResult("out", 1000, ["id"], 10.0, "here", startup_seconds=8.0,
                           first_rows=200)
    assert steady.rows_per_second == 400.0  # 800 rows in the 2 s after the first batch
    assert "400.0 rows/s after the first 200 rows and 8.0 s of start-up" in steady.summary()

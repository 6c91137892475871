"""What the command line shows: probabilities rounded for people and exact with --json, float32
values by their shortest text, `--json` on demo-data."""

import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from raycache._cli import main
from raycache._cli.predict import _jsonl


def predictions(path) -> str:
    probs = np.array([[0.000363, 0.999637], [0.25, 0.75]], np.float32)
    pq.write_table(pa.table({
        "id": ["a", "b"], "score": pa.array([0.1, 0.2], pa.float64()),
        "probabilities": pa.FixedSizeListArray.from_arrays(pa.array(probs.reshape(-1)), 2),
        "embedding": pa.FixedSizeListArray.from_arrays(
            pa.array(np.array([0.1, 1 / 3, 0.5, 2.0], np.float32)), 2)}), path)
    return str(path)


def test_probabilities_are_rounded_for_people_and_exact_with_json(tmp_path):
    path = predictions(tmp_path / "p.parquet")
    shown, exact = io.StringIO(), io.StringIO()
    _jsonl(path, shown)
    _jsonl(path, exact, exact=True)
    first = json.loads(shown.getvalue().splitlines()[0])
    assert first["probabilities"] == [0.000363, 0.9996]
    assert '"probabilities": [0.000363, 0.9996]' in shown.getvalue()  # not 0.000362999999...
    assert first["embedding"] == [0.1, 0.33333334] and first["score"] == 0.1
    rows = [json.loads(line) for line in exact.getvalue().splitlines()]
    got = np.array([r["probabilities"] for r in rows], np.float32)
    assert np.array_equal(got, pq.read_table(path).column("probabilities").combine_chunks()
                          .flatten().to_numpy().reshape(2, 2))  # the float32 values, exactly
    assert rows[0]["probabilities"][1] == 0.999637


def test_demo_data_prints_json(tmp_path, capsys):
    out = tmp_path / "docs.parquet"
    assert main(["demo-data", str(out), "--per-topic", "3", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got == {"path": str(out), "rows": pq.ParquetFile(out).metadata.num_rows}
    assert got["rows"] > 0

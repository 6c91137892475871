"""The command line: fill and train from YAML, ls and inspect, errors as one clear line."""

import json

import pytest
import yaml

from raycache._cli import main
from tests.conftest import toy_fill

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]


def test_fill_train_ls_inspect(ray_session, separable_source, tmp_path, capsys):
    store = str(tmp_path / "store")
    fill_yaml = tmp_path / "fill.yaml"
    fill_yaml.write_text(yaml.safe_dump(toy_fill(str(separable_source), store)))
    assert main(["fill", "--config", str(fill_yaml), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "miss, 600 rows (600 encoded, 0 reused), 4 shards" in out and "s start-up" in out
    assert main(["fill", "--config", str(fill_yaml)]) == 0
    assert "hit, 600 rows in 4 shards, encoded nothing" in capsys.readouterr().out

    train_yaml = tmp_path / "train.yaml"
    train_yaml.write_text(yaml.safe_dump({"cache": "toy", "store": {"uri": store}, "epochs": 2,
                                          "lr": 0.05, "num_workers": 2}))
    assert main(["train", "--config", str(train_yaml), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "epoch 2/2" not in out and "epoch 1/2" not in out  # --no-progress: no epoch lines
    assert "the checkpoint holds epoch" in out and "val_acc" in out

    assert main(["ls", store]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("toy/") and "rows=600" in line and "encoders=proj:16" in line

    assert main(["inspect", "toy", "--store", store]) == 0
    out = capsys.readouterr().out
    assert "encoder      proj: torch on 'features', dim 16, float32" in out
    assert "a.parquet" in out and "b.parquet" in out
    assert main(["inspect", "toy", "--store", store, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["key_column"] == "id"


def test_raycache_errors_exit_3_with_the_message(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"name": "x", "source": {"path": "/nope"}, "encoders": []}))
    assert main(["fill", "--config", str(bad)]) == 3
    err = capsys.readouterr().err  # may also hold a line that Ray forwards from an earlier run
    assert any(line.startswith("raycache fill: error:") for line in err.splitlines())
    assert "encoders: empty" in err
    assert main(["inspect", "ghost", "--store", str(tmp_path)]) == 3
    assert "no committed cache named 'ghost'" in capsys.readouterr().err


def test_demo_data_writes_the_demo_dataset_where_asked(tmp_path, capsys):
    import pyarrow.parquet as pq

    path = tmp_path / "d" / "docs.parquet"
    assert main(["demo-data", str(path), "--per-topic", "2"]) == 0
    assert capsys.readouterr().out.strip() == str(path)
    table = pq.read_table(path)
    assert table.num_rows == 12 and {"id", "text", "label"} <= set(table.column_names)
    with pytest.raises(SystemExit):
        main(["demo-data", str(path), "--per-topic", "0"])
    assert "'0': expected a whole number >= 1" in capsys.readouterr().err

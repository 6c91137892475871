"""One command line: --store on every command, help on every option, --set overrides, predict
from a run folder, runs with what predict needs, flags named as flags in messages."""

import argparse
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import raycache
from raycache import ConfigError
from raycache._cli import build_parser, main
from raycache._core.overrides import overridden
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(300)

STORE_COMMANDS = ("fill", "train", "pipeline", "ls", "inspect", "repair", "runs", "verify", "du",
                  "gc", "demo")


def commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> Path:
    """A toy cache filled in this process (no Ray), its source and its fill YAML."""
    root = tmp_path_factory.mktemp("cli")
    (root / "source").mkdir()
    pq.write_table(separable(n=300), root / "source" / "a.parquet")
    cfg = toy_fill(str(root / "source"), str(root / "store"), in_process=True)
    (root / "fill.yaml").write_text(yaml.safe_dump(cfg))
    raycache.fill(cfg)
    return root


def train_yaml(root: Path, **over) -> str:
    path = root / "train.yaml"
    path.write_text(yaml.safe_dump({"cache": "toy", "store": {"uri": str(root / "store")},
                                    "epochs": 2, "num_workers": 0, "progress": False, **over}))
    return str(path)


def test_every_option_has_help_and_every_store_command_takes_store():
    found = commands()
    for name, parser in found.items():
        for action in parser._actions:
            assert action.help, f"raycache {name} {action.option_strings or action.dest}"
    for name in STORE_COMMANDS:
        assert "--store" in found[name]._option_string_actions, name


def test_ls_takes_store_as_a_flag_or_a_word(tmp_path, capsys):
    empty = str(tmp_path / "empty")
    assert main(["ls", "--store", empty]) == 0
    assert capsys.readouterr().out.strip() == f"no committed caches in {empty}"
    assert main(["ls", empty]) == 0
    assert capsys.readouterr().out.strip() == f"no committed caches in {empty}"


def test_set_overrides_nest_dotted_keys_and_parse_yaml_values(filled, capsys):
    data = overridden(train_yaml(filled), ["epochs=1", "optim.lr=1e-2", "loop.seed=7",
                                           "run_name=set-run", "sweep.optim.lr=[0.1, 0.01]"],
                      flat=("sweep",))
    assert data["epochs"] == 1 and data["optim"] == {"lr": 0.01} and data["loop"] == {"seed": 7}
    assert data["sweep"] == {"optim.lr": [0.1, 0.01]} and data["run_name"] == "set-run"
    assert main(["train", "--config", train_yaml(filled), "--set", "epochs=1",
                 "--set", "optim.lr=0.01", "--set", "run_name=set-run", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "trained epoch 1 of 1" in out and "run set-run" in out
    record = json.loads((next((filled / "store").glob("toy/*/runs/set-run")) / "run.json")
                        .read_text())
    assert record["recipe"]["optim"]["lr"] == 0.01 and record["recipe"]["loop"]["epochs"] == 1


def test_set_with_an_unknown_or_misplaced_key_is_the_loaders_config_error(filled, capsys):
    assert main(["train", "--config", train_yaml(filled), "--set", "optim.lrr=0.1"]) == 3
    err = capsys.readouterr().err
    with pytest.raises(ConfigError) as loader:
        raycache.train({**yaml.safe_load(Path(train_yaml(filled)).read_text()),
                        "optim": {"lrr": 0.1}})
    assert loader.value.problems[0] in err and "optim.lrr: unknown field" in err
    assert main(["fill", "--config", str(filled / "fill.yaml"), "--set", "name.x=1"]) == 3
    assert "--set name.x=1: name is 'toy', not a group of settings" in capsys.readouterr().err
    assert main(["fill", "--config", str(filled / "fill.yaml"), "--set", "rows_per_shard"]) == 3
    assert "expected KEY=VALUE" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="config file 'nope.yaml' does not exist"):
        overridden("nope.yaml", ["epochs=1"])


def test_fill_store_flag_replaces_the_configs_store(filled, tmp_path, capsys):
    other = tmp_path / "other"
    assert main(["fill", "--config", str(filled / "fill.yaml"), "--store", str(other),
                 "--set", "name=elsewhere"]) == 0
    assert capsys.readouterr().out.startswith("fill elsewhere/")
    assert [c.name for c in raycache.ls(str(other))] == ["elsewhere"]


def test_runs_shows_what_predict_needs_and_predict_takes_the_run_folder(filled, tmp_path,
                                                                       capsys):
    store = str(filled / "store")
    assert main(["train", "--config", train_yaml(filled, run_name="for-predict",
                                                 evaluation={"monitor": "val_f1"}),
                 "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["runs", "toy", "--store", store]) == 0
    out = capsys.readouterr().out.splitlines()
    i = next(i for i, line in enumerate(out) if line.startswith("for-predict "))
    assert "classification/linear" in out[i] and "val_f1 " in out[i] and "(best " in out[i]
    checkpoint = out[i + 1].strip().removeprefix("checkpoint ")
    assert Path(checkpoint, "head.json").is_file()
    run_folder = str(Path(checkpoint).parent)
    rows = tmp_path / "rows.parquet"
    pq.write_table(separable(n=20).select(["id", "features"]), rows)
    for given in (run_folder, checkpoint):
        output = tmp_path / f"{Path(given).name}.parquet"
        assert main(["predict", "--checkpoint", given, "--input", str(rows), "--output",
                     str(output), "--in-process", "true", "--no-progress"]) == 0
        assert pq.read_table(output).num_rows == 20
    capsys.readouterr()
    # a run folder without a complete checkpoint: a clear error, no traceback
    empty = tmp_path / "runs" / "started"
    empty.mkdir(parents=True)
    (empty / "run.json").write_text("{}")
    assert main(["predict", "--checkpoint", str(empty), "--input", str(rows), "--output",
                 str(tmp_path / "x.parquet"), "--in-process", "true"]) == 3
    err = capsys.readouterr().err
    assert f"run folder {str(empty)!r} has no complete checkpoint yet" in err
    assert "Traceback" not in err


def test_messages_name_flags_as_flags(filled, tmp_path, capsys):
    store = str(filled / "store")
    assert main(["gc", "--store", store, "--retain", "0"]) == 0
    out = capsys.readouterr().out
    assert "pass --include-newest (include_newest=True) to remove it" in out
    assert main(["gc", "--store", store, "--retain", "-1", "--older-than", "soon"]) == 3
    err = capsys.readouterr().err
    assert "--retain=-1: expected a whole number >= 0" in err
    assert "--older-than='soon'" in err and " retain=" not in err and "older_than" not in err
    rows = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"id": ["a"], "features": [[0.0] * 8]}), rows)
    assert main(["predict", "--checkpoint", str(tmp_path), "--input", str(rows), "--output",
                 str(tmp_path / "o.parquet"), "--in-process", "true", "--num-gpus", "1"]) == 3
    err = capsys.readouterr().err
    assert "--in-process=true runs no Ray actors" in err and "set --num-gpus 0" in err


@pytest.mark.parametrize("command", [["runs", "toy"], ["repair", "toy"], ["gc"],
                                     ["fill", "--config", "CONFIG"]])
def test_a_store_that_is_a_file_is_a_clear_error(filled, tmp_path, capsys, command):
    afile = tmp_path / "store.txt"
    afile.write_text("not a store")
    argv = [str(filled / "fill.yaml") if a == "CONFIG" else a for a in command]
    assert main([*argv, "--store", str(afile)]) == 3
    err = capsys.readouterr().err
    assert f"store {str(afile)!r} is a file, not a folder" in err
    assert "Traceback" not in err


def test_every_command_takes_json():
    assert [name for name, p in commands().items() if "--json" not in p._option_string_actions
            ] == []

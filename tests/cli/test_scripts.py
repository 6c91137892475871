"""The command line for scripts: --version and raycache.__version__, --json on ls, runs, du,
verify and gc (one JSON document, nothing else on stdout), distinct exit codes, `raycache
export` (to a file, to stdout with `--to -`, to Lance and Qdrant), and curves.png of a one-solve
head showing its values."""

import dataclasses
import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raycache
from raycache import _cli
from raycache._cli import main
from raycache._cli.scripting import CRASH, DAMAGED, ERROR, EXIT_CODES, USAGE, jsonable
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """A store with one toy cache (in-process fill) and one in-process training run."""
    root = tmp_path_factory.mktemp("scripts")
    (root / "source").mkdir()
    pq.write_table(separable(n=300), root / "source" / "a.parquet")
    raycache.fill(toy_fill(str(root / "source"), str(root / "store"), in_process=True))
    raycache.train({"cache": "toy", "store": {"uri": str(root / "store")}, "label": "label",
                    "epochs": 2, "num_workers": 0, "progress": False, "run_name": "r1",
                    "monitor": "val_loss"})
    return str(root / "store")


def run_json(capsys, *argv: str) -> object:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_version_comes_from_the_package_metadata():
    installed = importlib.metadata.version("raycache")
    assert raycache.__version__ == installed
    done = subprocess.run([sys.executable, "-m", "raycache", "--version"], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == f"raycache {installed}"


def test_json_of_ls_runs_du_verify_and_gc(store, capsys):
    cache = raycache.open_cache("toy", store)
    [listed] = run_json(capsys, "ls", store, "--json")
    assert listed["name"] == "toy" and listed["fingerprint"] == cache.fingerprint
    assert listed["rows"] == 300 and listed["uri"] == cache.uri
    [run] = run_json(capsys, "runs", "toy", "--store", store, "--json")
    assert run["name"] == "r1" and run["status"] == "finished" and run["epochs_done"] == 2
    assert run["checkpoint"]
    [usage] = run_json(capsys, "du", "--store", store, "--json")
    assert usage["fingerprint"] == cache.fingerprint and usage["committed"] is True
    assert usage["bytes"] > 0 and usage["state"] and usage["own_bytes"] == usage["bytes"]
    report = run_json(capsys, "verify", "toy", "--store", store, "--json")
    assert report["ok"] is True and report["rows"] == 300 and report["bad"] == {}
    gc = run_json(capsys, "gc", "--store", store, "--json")
    assert gc["deleted"] is False and gc["removed"] == [] and gc["bytes"] == 0


def test_jsonable_writes_what_json_cannot_take_as_json():
    assert jsonable({"a": (1, np.float32(0.5)), "b": float("nan"), "c": Path("x")}) == \
        {"a": [1, 0.5], "b": None, "c": "x"}


def test_exit_codes_are_distinct_and_documented(store, tmp_path, capsys, monkeypatch):
    assert len(set(EXIT_CODES)) == 5 and (USAGE, ERROR, DAMAGED, CRASH) == (2, 3, 1, 4)
    with pytest.raises(SystemExit) as usage:
        main(["ls", "--no-such-flag"])
    assert usage.value.code == USAGE
    assert main(["inspect", "ghost", "--store", store]) == ERROR
    assert "no committed cache named 'ghost'" in capsys.readouterr().err

    def broken(args):
        raise RuntimeError("a bug")

    monkeypatch.setitem(_cli.COMMANDS, "du", dataclasses.replace(_cli.COMMANDS["du"], run=broken))
    assert main(["du", "--store", store]) == CRASH
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: a bug" in err and "crashed (exit code 4)" in err
    monkeypatch.undo()
    copy = tmp_path / "store"
    import shutil

    shutil.copytree(store, copy)
    shard = next(copy.glob("toy/*/shards/*.parquet"))
    shard.write_bytes(shard.read_bytes()[:-10])
    assert main(["verify", "toy", "--store", str(copy), "--json"]) == DAMAGED
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and len(report["bad"]) == 1
    text = (ROOT / "docs" / "reference" / "cli.md").read_text()
    for code in EXIT_CODES:
        assert f"| {code} |" in text


def test_export_command_writes_parquet_to_a_file_and_to_stdout(store, tmp_path, capsys):
    out = tmp_path / "toy.parquet"
    done = run_json(capsys, "export", "toy", "--store", store, "--to", str(out), "--json")
    assert done["rows"] == 300 and done["format"] == "parquet" and done["to"] == str(out)
    want = raycache.open_cache("toy", store).to_arrow(["id", "label", "name", "proj"])
    assert pq.read_table(out).select(want.column_names).equals(want.cast(
        pq.read_table(out).select(want.column_names).schema))
    piped = subprocess.run([sys.executable, "-m", "raycache", "export", "toy", "--store", store,
                            "--to", "-"], capture_output=True, timeout=120,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert piped.returncode == 0, piped.stderr.decode()[-2000:]
    assert b"export toy/" in piped.stderr and b"300 rows" in piped.stderr
    assert pq.read_table(pa.BufferReader(piped.stdout)).equals(pq.read_table(out))
    assert main(["export", "toy", "--store", store, "--to", str(out)]) == ERROR
    assert "exists; pass overwrite=True (--overwrite)" in capsys.readouterr().err
    assert main(["export", "toy", "--store", store, "--to", "-", "--format", "lance"]) == ERROR


def test_export_command_to_lance_and_qdrant(store, tmp_path, capsys):
    pytest.importorskip("lance")
    pytest.importorskip("qdrant_client")
    lanced = run_json(capsys, "export", "toy", "--store", store, "--format", "lance", "--to",
                      str(tmp_path / "toy.lance"), "--json")
    assert lanced["rows"] == 300
    folder = tmp_path / "qdrant"
    put = run_json(capsys, "export", "toy", "--store", store, "--format", "qdrant", "--to",
                   str(folder), "--collection", "docs", "--json")
    assert put["rows"] == 300 and put["to"] == f"{folder} collection docs"


def test_curves_of_a_one_solve_head_show_its_values(tmp_path):
    from matplotlib.image import imread

    from raycache._train.folder.metrics import _curves

    path = tmp_path / "curves.png"
    _curves(str(path), [{"epoch": 1, "train_loss": 0.4, "val_loss": 0.5, "train_acc": 0.9,
                         "val_acc": 0.85}])
    pixels = imread(path)[..., :3]
    blue = np.all(np.abs(pixels - np.array([31, 119, 180]) / 255) < 0.02, axis=-1).sum()
    orange = np.all(np.abs(pixels - np.array([255, 127, 14]) / 255) < 0.02, axis=-1).sum()
    assert blue > 2000 and orange > 2000  # bars, not a lone point no line joins


def test_a_config_piped_to_stdin_with_config_dash(store, tmp_path):
    piped = subprocess.run(
        [sys.executable, "-m", "raycache", "train", "--config", "-", "--no-progress"],
        input=f"cache: toy\nstore: {{uri: {store}}}\nlabel: label\nepochs: 1\nnum_workers: 0\n"
              "run_name: piped\nmonitor: val_loss\n", capture_output=True, text=True, timeout=240,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert piped.returncode == 0, piped.stderr[-2000:]
    assert "run piped" in piped.stdout
    bad = subprocess.run([sys.executable, "-m", "raycache", "fill", "--config", "-"],
                         input="- a list\n", capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert bad.returncode == ERROR
    assert "config from stdin (--config -): expected a mapping of settings, got list" in bad.stderr


def test_json_summaries_are_one_document_on_stdout_with_the_results_fields(store, tmp_path,
                                                                          capsys, monkeypatch):
    """fill, train, pipeline, predict (and --input - / --output -), probe, repair, compact and
    evaluate with --json: stdout parses as one JSON object with the key fields; progress and
    logs go to stderr. A second version's run: `runs` lists both versions', sorted by the
    served head's metric."""
    import shutil

    root = tmp_path / "copy"
    shutil.copytree(Path(store).parent, root)
    db, source = str(root / "store"), str(root / "source")
    first = raycache.open_cache("toy", db)  # r1's version; its source was elsewhere
    (root / "fill.yaml").write_text(json.dumps(toy_fill(source, db, in_process=True)))
    done = run_json(capsys, "fill", "--config", str(root / "fill.yaml"), "--json")
    cache = raycache.open_cache("toy", db)
    assert done["hit"] is False and done["fingerprint"] == cache.fingerprint != first.fingerprint
    assert done["rows"] == 300 and done["uri"] == cache.uri and "options" not in done
    train = {"cache": "toy", "store": {"uri": db}, "epochs": 2, "num_workers": 0,
             "label": "label", "run_name": "j1", "monitor": "val_loss"}
    (root / "train.yaml").write_text(json.dumps(train))
    run = run_json(capsys, "train", "--config", str(root / "train.yaml"), "--json")
    assert run["run_name"] == "j1" and Path(run["checkpoint"], "head.json").is_file()
    assert run["epochs"] == 2 and run["served"]["epoch"] == run["weights_epoch"]
    assert 0 <= run["served"]["val_acc"] <= 1 and run["fingerprint"] == cache.fingerprint
    (root / "pipeline.yaml").write_text(json.dumps({
        "fill": toy_fill(source, db, in_process=True), "train": {**train, "run_name": "j2"}}))
    both = run_json(capsys, "pipeline", "--config", str(root / "pipeline.yaml"), "--json")
    assert both["fill"]["hit"] is True and both["train"]["run_name"] == "j2"

    rows = tmp_path / "rows.parquet"
    pq.write_table(separable(n=300).slice(0, 40), rows)
    predicted = run_json(capsys, "predict", "--checkpoint", run["checkpoint"], "--input",
                         str(rows), "--output", str(tmp_path / "p.parquet"), "--in-process",
                         "true", "--no-progress", "--json")
    assert predicted["rows"] == 40 and predicted["columns"][0] == "id"
    lines = "".join(json.dumps(r) + "\n" for r in separable(n=300).slice(0, 5).to_pylist())
    monkeypatch.setattr(sys, "stdin", __import__("io").TextIOWrapper(
        __import__("io").BytesIO(lines.encode())))
    assert main(["predict", "--checkpoint", run["checkpoint"], "--input", "-", "--output", "-",
                 "--in-process", "true", "--no-progress"]) == 0
    piped = capsys.readouterr()
    out = [json.loads(line) for line in piped.out.splitlines()]
    assert [r["id"] for r in out] == [f"row-{i:05d}" for i in range(5)]
    assert all(isinstance(r["prediction"], int) for r in out)
    assert "predict: 5 rows -> -" in piped.err
    from raycache._cli.predict import sniff

    assert (sniff(b' \n{"id": 1}'), sniff(b"id,text\n1,a\n")) == ("jsonl", "csv")

    probe = {"caches": ["toy"], "store": {"uri": db}, "label": "name", "methods": ["logreg"],
             "progress": False, "report": False, "num_workers": 0, "logreg": {"C": [1.0]}}
    (root / "probe.yaml").write_text(json.dumps(probe))
    probed = run_json(capsys, "probe", "--config", str(root / "probe.yaml"), "--json")
    assert probed["select"] and probed["best"]["method"] == "logreg"
    assert probed["rows"] and "config" not in probed
    repaired = run_json(capsys, "repair", "toy", "--store", db, "--json", "--no-progress")
    assert repaired["repair"] is True and repaired["hit"] is True and repaired["rows"] == 300
    compacted = run_json(capsys, "compact", "toy", "--store", db, "--json", "--no-progress")
    assert compacted["compaction"] is True and compacted["fingerprint"] == cache.fingerprint
    labelled = tmp_path / "labelled.parquet"
    pq.write_table(separable(n=300).slice(0, 60), labelled)
    scored = run_json(capsys, "evaluate", "--checkpoint", run["checkpoint"], "--input",
                      str(labelled), "--json")
    assert 0 <= scored["accuracy"] <= 1

    pq.write_table(separable(n=320), root / "source" / "a.parquet")  # a second version
    newer = raycache.fill(toy_fill(source, db, in_process=True)).cache
    raycache.train({**train, "fingerprint": newer.fingerprint, "run_name": "v2", "epochs": 1})
    capsys.readouterr()  # the SDK call's own epoch line
    listed = run_json(capsys, "runs", "toy", "--store", db, "--json", "--sort", "metric")
    assert {r["cache"] for r in listed} == {f"toy/{first.fingerprint}",
                                             f"toy/{cache.fingerprint}",
                                             f"toy/{newer.fingerprint}"}
    assert {"r1", "j1", "j2", "v2"} <= {r["name"] for r in listed}
    assert {r["monitor"] for r in listed} == {"val_loss"}  # lowest first
    values = [r["served_metric"] for r in listed]
    assert None not in values and values == sorted(values) and len(set(values)) > 1
    assert main(["runs", "toy", "--store", db, "--sort", "name"]) == 0
    text = capsys.readouterr().out.splitlines()
    names = [line.split()[0] for line in text[::2]]
    assert names == sorted(names) and text[names.index("v2") * 2].endswith(
        f"toy/{newer.fingerprint}") and " served at epoch " in text[0]


def test_a_summarys_json_holds_no_storage_options_or_credentials(store):
    """FillResult.to_dict of a cache opened with a password in its store's options: the
    options are not in it, in any form."""
    from raycache._cache.committed import Cache
    from raycache._cache.store import Store
    from raycache._fill.result import FillResult

    opened = raycache.open_cache("toy", store)
    secret = Store(store, {"password": "hunter2-XYZ", "region": "eu-west-9"})
    result = FillResult(cache=Cache(secret, opened.manifest), hit=True, seconds=1.0,
                        encoded_rows=0)
    text = json.dumps(jsonable(result.to_dict()))
    assert json.loads(text)["fingerprint"] == opened.fingerprint
    assert "hunter2" not in text and "eu-west-9" not in text and "redacted" not in text


def test_tables_are_drawn_by_rich_on_a_wide_terminal_and_plain_in_a_pipe(capsys, monkeypatch):
    from raycache._cli.tables import print_table

    rows = [["toy/abc", 300], ["docs/def", 12]]
    print_table(["cache", "rows"], rows, plain=["toy/abc rows=300", "docs/def rows=12"])
    assert capsys.readouterr().out == "toy/abc rows=300\ndocs/def rows=12\n"  # not a TTY
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setenv("COLUMNS", "100")
    print_table(["cache", "rows"], rows, plain=["plain"])
    drawn = capsys.readouterr().out
    assert "┃" in drawn and "docs/def" in drawn and "plain" not in drawn
    monkeypatch.setenv("COLUMNS", "20")  # too narrow for the table: the plain lines
    print_table(["cache", "rows"], rows, plain=["plain"])
    assert capsys.readouterr().out == "plain\n"


def test_the_process_exits_with_the_commands_code_once_its_threads_and_exit_handlers_ran(
        tmp_path):
    """run() ends the process past the interpreter's teardown (where a native pool's live
    thread aborts it), but not before a thread the interpreter would wait for, or an exit
    handler (Ray's shutdown, logging's flush), has run."""
    code = (
        "import atexit, sys, threading, time\n"
        "atexit.register(lambda: print('exit handler ran', flush=True))\n"
        "def late():\n"
        "    time.sleep(0.5)\n"
        "    print('thread finished', flush=True)\n"
        "threading.Thread(target=late).start()\n"
        "sys.argv = ['raycache', 'runs', 'nope', '--store', sys.argv[1]]\n"
        "from raycache._cli import run\n"
        "run()\n"
        "print('not reached')\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "store")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == ERROR, done  # the command's refusal: no cache named nope
    assert "no committed cache named 'nope'" in done.stderr
    assert done.stdout.splitlines()[-2:] == ["thread finished", "exit handler ran"], done
    assert "not reached" not in done.stdout

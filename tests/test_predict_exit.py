"""`raycache predict` refusing a JSONL input as it runs exits 3, never 134: nothing of its own
runs on at exit (no progress-bar monitor thread; no pyarrow reader on a Python file), checked
in this process and by the real command line run many times at once."""

import json
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import raycache
from raycache import SourceError
from raycache._source import files
from raycache._source.file import SourceFile
from tests.conftest import separable, toy_fill
from tests.test_schema_reads import Watched

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parents[1]


def conflicting(path: Path, rows: int = 3000) -> Path:
    """JSONL whose `features` turn from lists to text past the first rows: refused as it is
    read, after the plan passed and the progress bar started."""
    table = separable(n=rows).to_pylist()
    for r in table[rows // 2:]:
        r["features"] = "oops"
    path.write_text("".join(json.dumps(r) + "\n" for r in table))
    return path


@pytest.fixture(scope="module")
def head(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("exit")
    (root / "source").mkdir()
    pq.write_table(separable(n=300), root / "source" / "a.parquet")
    store = str(root / "store")
    raycache.fill(toy_fill(str(root / "source"), store, in_process=True))
    ckpt = raycache.train({"cache": "toy", "store": {"uri": store}, "num_workers": 0,
                           "progress": False, "epochs": 1}).checkpoint
    return {"checkpoint": ckpt, "input": conflicting(root / "bad.jsonl"), "root": root}


def test_the_progress_bar_starts_no_monitor_thread(monkeypatch):
    """tqdm's monitor thread is never stopped (a bar's close leaves it) and, woken at exit,
    races the interpreter finalising: the bar of fill and predict starts none."""
    from tqdm import std

    from raycache._compute.runner import progress_bar

    started: list = []
    monkeypatch.setattr(std, "TMonitor", lambda *args: started.append(args))
    monkeypatch.setattr(std.tqdm, "monitor", None)
    with progress_bar(True, 10, "predict") as bar:
        bar.update(4)
    assert started == []


def test_a_text_file_is_read_here_whole_before_pyarrow_parses_it(tmp_path, monkeypatch):
    path = conflicting(tmp_path / "big.jsonl", rows=30_000)  # several of pyarrow's blocks
    from raycache._source.config import SourceConfig

    _, listed = files.list_files(SourceConfig(path=str(path)))
    log: list = []
    monkeypatch.setattr(SourceFile, "open", lambda self, options: Watched(path, log))
    unit = files.Unit(listed[0])
    with pytest.raises(SourceError, match="changed from array to string"):
        list(files.read_unit(unit, "jsonl", {}, 1000, ["id", "features"]))
    here = threading.get_ident()
    assert log and all(ident == here and not closed for ident, closed in log), log


def test_a_jsonl_file_whose_types_change_is_refused_and_never_crashes_the_process(tmp_path):
    """pyarrow's threaded JSON parser segfaults now and then on such a file (about one call in
    ten, more under load): the read is refused 40 times over in a process of its own, which a
    crash would end with a signal."""
    path = conflicting(tmp_path / "big.jsonl", rows=30_000)
    script = (
        "import sys, pyarrow as pa\n"
        "from raycache._source.files import parse_text\n"
        "data = open(sys.argv[1], 'rb').read()\n"
        "for _ in range(40):\n"
        "    try:\n"
        "        parse_text(pa.BufferReader(data), 'jsonl')\n"
        "    except pa.ArrowInvalid as exc:\n"
        "        assert 'changed from array to string' in str(exc), exc\n"
        "    else:\n"
        "        raise SystemExit('a file whose types change was parsed')\n")
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True,
                          text=True, timeout=240, cwd=ROOT)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_command_line_refusing_as_it_runs_exits_3_every_time(head):
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}",
           "HF_HUB_OFFLINE": "1"}

    def once(i: int) -> tuple[int, str]:
        done = subprocess.run(
            [sys.executable, "-m", "raycache", "predict", "--checkpoint", head["checkpoint"],
             "--input", str(head["input"]), "--output", str(head["root"] / f"o{i}.parquet"),
             "--in-process", "true", "--trust-code"],
            capture_output=True, text=True, env=env, timeout=240)
        return done.returncode, done.stderr[-2000:]

    with ThreadPoolExecutor(4) as runs:  # four at once: the load the aborts showed under
        results = list(runs.map(once, range(8)))
    assert [code for code, _ in results] == [3] * 8, [r for r in results if r[0] != 3][:2]
    assert all("changed from array to string" in err for _, err in results)

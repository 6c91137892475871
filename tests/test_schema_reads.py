"""A JSONL or CSV file's schema is read in the calling thread from its first block in memory:
no pyarrow reader is left reading ahead on the open file, which made `raycache predict` abort
with exit 134 at exit after it refused such an input (pyarrow's threads still waiting on it)."""

import json
import threading
import time

import pyarrow as pa
import pyarrow.csv as pcsv
import pytest

from raycache._source import files
from raycache._source.file import SourceFile


class Watched:
    """A file object that records the thread of every read, and reads after close."""

    def __init__(self, path, log: list):
        self.raw, self.log = path.open("rb"), log

    def __getattr__(self, name):
        return getattr(self.raw, name)

    def read(self, *args):
        self.log.append((threading.get_ident(), self.raw.closed))
        return self.raw.read(*args)

    def readline(self, *args):
        self.log.append((threading.get_ident(), self.raw.closed))
        return self.raw.readline(*args)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.raw.close()


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_a_text_files_schema_is_read_here_and_nothing_reads_it_afterwards(tmp_path, monkeypatch,
                                                                          fmt):
    rows = [{"id": f"row-{i}", "text": "some words " * 8, "n": i} for i in range(40_000)]
    path = tmp_path / f"big.{fmt}"  # several of pyarrow's 1 MiB blocks
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        pcsv.write_csv(pa.Table.from_pylist(rows), path)
    log: list = []
    monkeypatch.setattr(SourceFile, "open", lambda self, options: Watched(path, log))
    schema = files.read_schema(SourceFile(str(path), path.stat().st_size, "v"), fmt, {})
    assert schema.names == ["id", "text", "n"]
    time.sleep(0.5)  # a reader left reading ahead would read on by now
    here = threading.get_ident()
    assert log and all(ident == here and not closed for ident, closed in log), log
    assert len(log) <= 2  # the first block and the rest of its line

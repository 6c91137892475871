"""On S3, what another process changed is read as it is now: a process that listed a version's
folder (its s3fs listing cache) reads the version again after another process compacted it,
and verify passes it (a moto server; no Ray)."""

import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raycache
from tests.conftest import TESTS, separable, toy_fill

pytestmark = [pytest.mark.s3, pytest.mark.timeout(300)]

COMPACT = ("import sys, raycache\n"
           "r = raycache.compact('toy', sys.argv[1], below=0.9, progress=False,\n"
           "                     trust_code=['toy_encoders:'])\n"
           "print(r.compacted_rows)")


def in_another_process(code: str, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         timeout=240, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip()


def test_a_version_compacted_by_another_process_reads_and_verifies(bucket, tmp_path):
    src = tmp_path / "source"
    src.mkdir()
    table = separable(n=200)
    pq.write_table(table, src / "a.parquet", row_group_size=50)
    store = f"{bucket}/caches"
    cfg = toy_fill(str(src), store, rows_per_shard=50, in_process=True, compact_below=0)
    raycache.fill(cfg)
    data = table.to_pydict()
    for i in range(0, 200, 2):  # half of each shard's inputs changed: shared in part
        data["features"][i] = [x + 1.0 for x in data["features"][i]]
    pq.write_table(pa.table(data, schema=table.schema), src / "a.parquet", row_group_size=50)
    v2 = raycache.fill(cfg).cache
    before = v2.read_table(["id", "proj"]).sort_by("id")
    assert raycache.verify(v2).ok and any(s.keep for s in v2.manifest.shards)
    assert json.loads(in_another_process(COMPACT, store)) == 100  # the kept rows, copied
    again = raycache.open_cache("toy", store)
    assert not any(s.keep for s in again.manifest.shards)  # the compacted shard list
    report = raycache.verify(again)
    assert report.ok, report.lines()
    assert again.read_table(["id", "proj"]).sort_by("id").equals(before)

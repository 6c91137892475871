"""A fixed-seed sequence of fills, gc, compactions, repairs (of a shard removed by hand) and
reads, from two processes on one moto S3 store: after every step, every kept version reads as a
from-scratch fill of its source, verifies, and the name's newest is the last version filled
(the second process keeps its s3fs listings between steps, as a long-lived one would)."""

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
from raycache._upkeep.refs import references
from tests.conftest import TESTS, separable, toy_fill

pytestmark = [pytest.mark.s3, pytest.mark.slow, pytest.mark.timeout(600)]

OPS = ["fill"] * 6 + ["gc", "compact", "repair", "read"] * 2
"""The steps, shuffled by the seed."""
CHANGES = ["edit", "remove", "relabel", "add", "append", "drop"]
"""What each new snapshot changes, in turn (the rows and files it picks: by the seed)."""
WORKER = r"""
import json, sys, raycache
for line in sys.stdin:
    cmd = json.loads(line)
    try:
        op = cmd["op"]
        if op == "fill":
            out = raycache.fill(cmd["cfg"]).cache.fingerprint
        elif op == "compact":
            out = raycache.compact("toy", cmd["store"], cmd["fp"], below=1.0, progress=False,
                                   trust_code=["toy_encoders:"]).cache.fingerprint
        elif op == "repair":
            out = raycache.repair("toy", cmd["store"], cmd["fp"], progress=False,
                                  trust_code=["toy_encoders:"]).encoded_rows
        elif op == "gc":
            out = [r.usage.id for r in raycache.gc(cmd["store"], retain=cmd["retain"],
                                                   delete=True, grace="0").removed]
        else:  # read the name's newest
            c = raycache.open_cache("toy", cmd["store"])
            out = [c.fingerprint, sorted(c.read_table(["id"]).column("id").to_pylist())]
        print(json.dumps({"ok": out}), flush=True)
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
"""


class Other:
    """The second process: one command a line in, one JSON answer a line out."""

    def __init__(self):
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env)

    def __call__(self, **cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        assert "error" not in answer, f"{cmd['op']} in the other process: {answer['error']}"
        return answer["ok"]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def snapshot(src: Path, n: int, rng: np.random.Generator) -> list[Path]:
    """Snapshot n: snapshot n-1's files with one change (inputs or labels edited, rows removed
    or appended, a file removed or added); earlier snapshots stay as they were."""
    folder = src / f"v{n}"
    folder.mkdir(parents=True)
    schema = separable(n=1).schema
    if n == 0:
        t = separable(n=300)
        tables = {f"f{i}.parquet": t.slice(100 * i, 100).to_pydict() for i in range(3)}
    else:
        tables = {p.name: pq.read_table(p).to_pydict() for p in sorted((src / f"v{n - 1}")
                                                                       .glob("*.parquet"))}
        change = CHANGES[(n - 1) % len(CHANGES)]
        name = str(rng.choice(sorted(tables)))
        d, rows = tables[name], len(tables[name]["id"])
        picked = rng.choice(rows, min(6, rows), replace=False).tolist()
        if change == "edit":
            for i in picked:
                d["features"][i] = [x + 1.0 for x in d["features"][i]]
        elif change == "relabel":
            for i in picked:
                d["label"][i] = (d["label"][i] + 1) % 3
        elif change == "remove" and rows > 10:
            tables[name] = {k: [v for i, v in enumerate(col) if i not in picked]
                            for k, col in d.items()}
        elif change == "drop" and len(tables) > 1:
            del tables[name]
        else:  # append to a file, or add one
            new = separable(n=20, seed=n).to_pydict()
            new["id"] = [f"s{n}-{i}" for i in range(20)]
            if change == "add":
                tables[f"g{n}.parquet"] = new
            else:
                tables[name] = {k: d[k] + new[k] for k in d}
    for file, data in tables.items():
        pq.write_table(pa.table(data, schema=schema), folder / file, row_group_size=25)
    return sorted(folder.glob("*.parquet"))


def rows(cache: raycache.Cache) -> pa.Table:
    return cache.read_table(["id", "label", "name", "proj"]).sort_by("id")


def same(got: pa.Table, want: pa.Table, what: str) -> None:
    assert got.column("id").to_pylist() == want.column("id").to_pylist(), what
    for c in ("label", "name"):
        assert got.column(c).to_pylist() == want.column(c).to_pylist(), what
    np.testing.assert_allclose(np.stack(got.column("proj").to_numpy(zero_copy_only=False)),
                               np.stack(want.column("proj").to_numpy(zero_copy_only=False)),
                               rtol=1e-5, atol=1e-6, err_msg=what)


def test_two_processes_fill_gc_compact_repair_and_read_one_s3_store(bucket, tmp_path):
    import s3fs

    rng = np.random.default_rng(41)
    store = f"{bucket}/caches"
    src = tmp_path / "src"
    expected: dict[str, pa.Table] = {}
    newest = ""
    other = Other()

    def cfg(files: list[Path]) -> dict:
        return toy_fill([str(f) for f in files], store, rows_per_shard=25, in_process=True,
                        compact_below=0)  # fills never compact: `compact` steps do

    def fill_version(n: int, here: bool) -> str:
        files = snapshot(src, n, rng)
        c = cfg(files)
        scratch = raycache.fill({**c, "name": "scratch", "share": False, "reuse": False,
                                 "store": {"uri": str(tmp_path / "scratch")}}).cache
        fp = raycache.fill(c).cache.fingerprint if here else other(op="fill", cfg=c)
        expected[fp] = rows(scratch)
        return fp

    done = []
    try:
        newest = fill_version(0, True)
        versions = 1
        for step, op in enumerate(rng.permutation(OPS).tolist()):
            here = bool(rng.integers(2))
            kept = [c.fingerprint for c in raycache.ls(store, "toy")]
            if op == "fill":
                newest = fill_version(versions, here)
                versions += 1
            elif op == "gc":
                retain = int(rng.integers(1, 3))
                if here:
                    raycache.gc(store, retain=retain, delete=True, grace="0")
                else:
                    other(op="gc", store=store, retain=retain)
            elif op == "compact":  # an older version where there is one: its place must stay
                fp = str(rng.choice(kept[:-1] or kept))
                if here:
                    raycache.compact("toy", store, fp, below=1.0, progress=False)
                else:
                    other(op="compact", store=store, fp=fp)
            elif op == "repair":  # a shard file no other kept version reads, removed by hand
                caches = raycache.ls(store, "toy")
                refs = references(c.manifest for c in caches)
                alone = {c.fingerprint: [p for p, by in refs.get(f"toy/{c.fingerprint}",
                                                                   {}).items()
                                         if by == {f"toy/{c.fingerprint}"}] for c in caches}
                older = [c for c in caches[:-1] if alone[c.fingerprint]]
                c = older[int(rng.integers(len(older)))] if older else caches[-1]
                alone = alone[c.fingerprint]
                if alone:
                    s3fs.S3FileSystem(skip_instance_cache=True).rm(f"{c.uri}/{alone[0]}")
                    assert not raycache.verify(c).ok
                    if here:
                        raycache.repair("toy", store, c.fingerprint, progress=False)
                    else:
                        other(op="repair", store=store, fp=c.fingerprint)
            else:
                fp, keys = other(op="read", store=store)
                assert fp == newest
                assert keys == expected[newest].column("id").to_pylist()
            done.append(f"{op}{'' if here and op != 'read' else ' (other process)'}")
            where = f"after step {step} ({', '.join(done)})"
            listed = raycache.ls(store, "toy")
            assert listed[-1].fingerprint == newest, where
            assert raycache.open_cache("toy", store).fingerprint == newest, where
            for c in listed:
                report = raycache.verify(c)
                assert report.ok, (where, report.lines())
                same(rows(c), expected[c.fingerprint], f"{c.fingerprint} {where}")
        assert versions == 7 and len(done) == len(OPS)
    finally:
        other.close()

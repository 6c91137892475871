"""What a Ray worker process keeps between tasks (_compute.memo): built once, the most recent
few of each kind, and nothing kept of a build that failed."""

import subprocess
import sys

import pytest

from raycache._compute import memo as module
from raycache._compute.memo import MEMO_SIZE, memo


@pytest.fixture(autouse=True)
def empty(monkeypatch):
    monkeypatch.setattr(module, "_MEMO", {})


def test_built_once_and_the_least_recently_used_dropped():
    built = []

    def build(key):
        return lambda: built.append(key) or f"model {key}"

    assert memo("encoder", "a", build("a")) == memo("encoder", "a", build("a")) == "model a"
    assert built == ["a"]
    assert memo("chain", "a", lambda: "stages a") == "stages a"  # kinds apart
    for key in ("b", "a", *(f"x{i}" for i in range(MEMO_SIZE - 1))):  # "a" used again: kept longer
        memo("encoder", key, build(key))
    assert "b" not in module._MEMO["encoder"] and "a" in module._MEMO["encoder"]
    assert len(module._MEMO["encoder"]) == MEMO_SIZE and built.count("a") == 1


def test_a_build_that_raises_keeps_nothing():
    def broken():
        raise RuntimeError("weights differ between loads")

    for _ in range(2):  # the next task tries again, and raises the same
        with pytest.raises(RuntimeError, match="weights differ"):
            memo("encoder", "bad", broken)
    assert "bad" not in module._MEMO["encoder"]


CANCELLED = """
import _thread, sys, threading, time

def cancel_mid_import():  # what Ray's cancel does: KeyboardInterrupt in the main thread
    while "torch.nn" not in sys.modules:
        time.sleep(0.001)
    _thread.interrupt_main()

threading.Thread(target=cancel_mid_import, daemon=True).start()
try:
    {first}
except KeyboardInterrupt:
    print("cancelled", flush=True)
{again}
print("sum", float(torch.ones(3).sum()), flush=True)
"""


def _cancelled(first: str, again: str) -> subprocess.CompletedProcess:
    code = CANCELLED.format(first=first, again=again)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=180)


@pytest.mark.timeout(400)
def test_a_task_cancelled_mid_build_leaves_a_build_the_next_task_uses():
    control = _cancelled("import torch", "import torch")  # cancelled in the main thread
    assert "cancelled" in control.stdout and "sum" not in control.stdout, control.stdout
    assert control.returncode != 0  # torch cannot be imported again: it raises, or crashes

    build = ("from raycache._compute.memo import memo\n"
             "    memo('chain', 'job', lambda: __import__('torch'), apart=True)")
    done = _cancelled(build, "torch = memo('chain', 'job', lambda: None)")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "cancelled" in done.stdout and "sum 3.0" in done.stdout, done.stdout


def test_a_cpu_pool_task_builds_its_stages_apart(monkeypatch):
    from raycache._compute import runner

    asked = {}

    def recorded(kind, key, build, apart=False):
        asked.update(kind=kind, apart=apart)
        return lambda table: table

    monkeypatch.setattr(runner, "memo", recorded)
    monkeypatch.setattr(runner, "set_threads", lambda pool: None)
    job = runner.Shipped(ref=type("Ref", (), {"hex": lambda self: "job"})())
    assert runner.chain_task("block", job, pool=None) == "block"
    assert asked == {"kind": "chain", "apart": True}  # a cancelled task cuts no import short

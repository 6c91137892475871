"""What a Ray worker process keeps between tasks (_compute.memo): built once, the most recent
few of each kind, and nothing kept of a build that failed."""

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

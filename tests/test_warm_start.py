"""A warm in-process run's start-up: a fresh process trains without importing Ray or
torch._dynamo, torch's optimizers step bit for bit as they do with it, and the run folder still
gets every artifact."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import TESTS, fill_in_fresh_process, separable, toy_fill

pytestmark = pytest.mark.timeout(300)

STEPS = """
import json, sys
import torch
from raycache._core.config import load
from raycache._train.config import TrainConfig
from raycache._train.optim import FUSED, OPTIMIZERS, build_optimizer
from raycache._train.runspec import Recipe

def recipe(name):
    return Recipe.from_config(load(TrainConfig, {"cache": "c", "optimizer": name, "lr": 0.05,
        "weight_decay": 0.01, "momentum": 0.9, "nesterov": name == "sgd"}))

def run(name, fused, ours):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3))
    r = recipe(name)
    make = lambda: (build_optimizer(model.parameters(), r, fused=fused) if ours else
                    OPTIMIZERS[name](model.parameters(), r.optim,
                                     **({"fused": True} if fused else {})))
    opt = make()
    for step in range(6):
        if step == 3:  # a resume: the state through state_dict into a new optimizer
            state = opt.state_dict()
            opt = make()
            opt.load_state_dict(state)
        x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        assert torch.is_grad_enabled()
    return [p.detach().clone() for p in model.parameters()]

cases = [(n, f) for n in OPTIMIZERS for f in ((False, True) if n in FUSED else (False,))]
ours = {case: run(*case, ours=True) for case in cases}
before = "torch._dynamo" in sys.modules
theirs = {case: run(*case, ours=False) for case in cases}
after = "torch._dynamo" in sys.modules
again = {case: run(*case, ours=True) for case in cases}  # with dynamo loaded: torch's own path
same = [all(torch.equal(a, b) for a, b in zip(ours[c], theirs[c])) for c in cases]
same_again = [all(torch.equal(a, b) for a, b in zip(again[c], theirs[c])) for c in cases]
print(json.dumps({"cases": len(cases), "dynamo_before": before, "dynamo_after": after,
                  "same": same, "same_again": same_again}))
"""


def fresh(code: str, *args: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS.parent), str(TESTS),
                                         env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         timeout=240, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_optimizers_step_bit_for_bit_as_torchs_without_importing_dynamo():
    out = fresh(STEPS)
    assert out["cases"] == 9
    assert out["dynamo_before"] is False  # ours never imported it; torch's own step does
    assert out["dynamo_after"] is True
    assert all(out["same"]) and all(out["same_again"]), out


TRAIN = """
import json, sys
import raycache
run = raycache.train(json.loads(sys.argv[1]))
print(json.dumps({"workers": run.spec.num_workers, "epochs": len(run.history),
                  "val_acc": run.metrics["val_acc"],
                  "imported": sorted(m for m in ("ray", "ray.train", "torch._dynamo")
                                     if m in sys.modules)}))
"""


def test_a_fresh_process_trains_in_process_without_ray_or_dynamo_and_keeps_its_artifacts(
        tmp_path):
    (tmp_path / "source").mkdir()
    pq.write_table(separable(), tmp_path / "source" / "a.parquet")
    fill_in_fresh_process(toy_fill(str(tmp_path / "source"), str(tmp_path / "store")))
    cfg = {"cache": "toy", "store": {"uri": str(tmp_path / "store")}, "epochs": 3, "lr": 0.05,
           "batch_size": 32, "progress": False, "run_name": "warm"}
    out = fresh(TRAIN, json.dumps(cfg))
    assert out["workers"] == 0 and out["epochs"] == 3 and out["val_acc"] > 0.9, out
    assert out["imported"] == [], out
    run = next(Path(tmp_path / "store").glob("toy/*/runs/warm"))
    names = {p.relative_to(run).parts[0] for p in run.rglob("*") if p.is_file()}
    assert {"metrics.jsonl", "curves.png", "tensorboard", "run.json",
            "checkpoint_000003"} <= names, names

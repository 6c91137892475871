"""Many heads in one pass: a sweep's members train on the same batches (a member ends where a
lone run of its settings ends), each with its own optimizer and early stopping; the best is
saved, every member is recorded, and a sweep resumes from its checkpoint."""

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

import raycache
from raycache.config import TrainConfig, load
from raycache.errors import ConfigError, RaycacheError
from raycache.heads import HeadSpec, build_head
from raycache.members import Members
from tests.conftest import separable, toy_fill

RESULT_KEYS = ("train_loss", "train_acc", "val_loss", "val_acc")


def test_bad_sweeps_name_the_value_what_was_expected_and_the_fix():
    with pytest.raises(ConfigError) as err:
        load(TrainConfig, {"cache": "c", "sweep": {"epochs": [1, 2], "lr": [], "dropout": 0.1,
                                                   "hidden": [[8], "wide"]}})
    text = str(err.value)
    for part in ("sweep.epochs: not a setting a sweep can vary", "shared by every member",
                 "sweep.lr=[]: expected a non-empty list", "sweep.dropout=0.1",
                 "sweep.hidden[1]='wide': expected a list"):
        assert part in text, text
    with pytest.raises(ConfigError, match=r"sweep member \{'lr': -0.1\}: lr=-0.1: must be > 0"):
        load(TrainConfig, {"cache": "c", "sweep": {"lr": [0.1, -0.1]}})
    with pytest.raises(ConfigError,
                       match=r"sweep member \{'head': 'nope'\}: head='nope': unknown"):
        load(TrainConfig, {"cache": "c", "sweep": {"head": ["linear", "nope"]}})
    with pytest.raises(ConfigError, match="select_mode='up'"):
        load(TrainConfig, {"cache": "c", "select_mode": "up"})


def test_members_module_runs_linear_heads_as_one_product_and_others_alone():
    spec = HeadSpec(head="linear", in_dim=6, num_classes=3, hidden=(5,), dropout=0.0,
                    encoders=("e",), label="y", cache="c", fingerprint="f")
    torch.manual_seed(0)
    heads = [build_head(spec), build_head(HeadSpec(**{**spec.__dict__, "head": "mlp"})),
             build_head(spec)]
    team = Members(heads)
    assert team.stacked == [0, 2] and team.looped == [1]
    x = torch.randn(4, 6)
    for head, out in zip(heads, team(x), strict=True):
        torch.testing.assert_close(out, head(x))


@pytest.fixture(scope="module")
def store(ray_session, tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("sweep")
    (root / "source").mkdir()
    pq.write_table(separable(), root / "source" / "a.parquet")
    raycache.fill(toy_fill(str(root / "source"), str(root / "store")))
    return str(root / "store")


def cfg(store: str, **over) -> dict:
    return {"cache": "toy", "store": {"uri": store}, "epochs": 3, "lr": 0.05, "batch_size": 32,
            "num_workers": 0, "progress": False, "checkpoint_seconds": 0, **over}


def state(run) -> dict:
    return torch.load(Path(run.checkpoint) / "state.pt", weights_only=False)


def results(history: list[dict]) -> list[float]:
    return [float(m[k]) for m in history for k in RESULT_KEYS]


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_a_sweep_trains_every_member_on_the_same_batches_and_saves_the_best(store):
    sweep = {"lr": [0.01, 0.05], "head": ["linear", "mlp"], "hidden": [[8], [32]]}
    run = raycache.train(cfg(store, sweep=sweep, run_name="sweep"))
    rows = run.sweep
    assert len(rows) == 8 and [r["member"] for r in rows] == list(range(8))
    assert rows[7]["settings"] == {"lr": 0.05, "head": "mlp", "hidden": [32]}
    members = state(run)["members"]
    # a member ends exactly where a lone run of its settings (same seed) ends
    for i, settings in ((7, {"lr": 0.05, "head": "mlp", "hidden": [32]}),
                        (4, {"lr": 0.05, "head": "linear"})):
        lone = raycache.train(cfg(store, **settings, run_name=f"lone-{i}"))
        assert not lone.spec.sweep and not lone.sweep  # a plain single-head run
        assert results(rows[i]["history"]) == pytest.approx(results(lone.history), rel=1e-5)
        for k, v in torch.load(Path(lone.checkpoint) / "head.pt").items():
            torch.testing.assert_close(members[i]["model"][k], v, rtol=1e-5, atol=1e-6)
    # linear heads ignore hidden: two members, one head, the same batches, the same weights
    assert results(rows[0]["history"]) == pytest.approx(results(rows[1]["history"]))
    assert results(rows[0]["history"]) != pytest.approx(results(rows[4]["history"]))  # lr
    assert results(rows[4]["history"]) != pytest.approx(results(rows[6]["history"]))  # head
    # the best by select (the monitor, val_loss) is the run's head
    best = min(rows, key=lambda r: r["val_loss"])
    assert run.best == best and best["selected"] and sum(r["selected"] for r in rows) == 1
    head = run.load_head()
    assert head.spec.head == best["settings"]["head"]
    for k, v in head.model.state_dict().items():
        torch.testing.assert_close(v, members[best["member"]]["model"][k])
    assert head.info["sweep"][best["member"]]["selected"]
    assert f"sweep of 8 heads, best: {best['settings']}" in run.summary()
    # every member recorded: sweep.jsonl, run.json; the same config again returns the run
    folder = Path(run.spec.run_dir)
    lines = [json.loads(x) for x in (folder / "sweep.jsonl").read_text().splitlines()]
    assert [x["settings"] for x in lines] == [r["settings"] for r in rows]
    record = json.loads((folder / "run.json").read_text())
    assert record["status"] == "finished" and len(record["sweep"]) == 8
    assert record["best"]["settings"] == best["settings"]
    again = raycache.train(cfg(store, sweep=sweep, run_name="sweep"))
    assert again.checkpoint == run.checkpoint and again.best["member"] == best["member"]
    assert len(run.sweep_frame()) == 8


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_each_member_stops_early_on_its_own(store):
    run = raycache.train(cfg(store, epochs=12, sweep={"lr": [0.5, 0.002]}, early_stopping=True,
                             patience=1, min_delta=0.01, select="val_acc", run_name="stops"))
    fast, slow = run.sweep
    assert fast["stopped"] and fast["epochs"] < 12, fast
    assert slow["epochs"] > fast["epochs"]
    assert len(run.history) == max(fast["epochs"], slow["epochs"])
    members = state(run)["members"]
    # a stopped member stopped stepping: its weights are those of its last epoch
    assert members[0]["progress"]["epoch"] == fast["epochs"]
    assert members[0]["schedule"]["step_no"] < members[1]["schedule"]["step_no"]
    assert run.best[run.spec.select] == max(r["val_acc"] for r in run.sweep)


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_a_sweep_resumes_from_its_checkpoint(store, monkeypatch):
    sweep = {"lr": [0.01, 0.05], "weight_decay": [0.0, 0.1]}
    reference = raycache.train(cfg(store, epochs=4, sweep=sweep, run_name="whole"))
    from raycache import loop

    real = loop.save

    def fail_after_two(team, rank):
        real(team, rank)
        if team.run.epoch == 2:
            raise RuntimeError("killed after epoch 2")

    monkeypatch.setattr(loop, "save", fail_after_two)
    config = cfg(store, epochs=4, sweep=sweep, run_name="broken", checkpoint_every=1,
                 max_failures=0)
    with pytest.raises(RaycacheError, match="killed after epoch 2"):
        raycache.train(config)
    monkeypatch.setattr(loop, "save", real)
    run = raycache.train(config)
    assert run.resumed_from == [2] and len(run.history) == 4
    assert results(run.history) == pytest.approx(results(reference.history), rel=1e-6)
    for got, want in zip(run.sweep, reference.sweep, strict=True):
        assert results(got["history"]) == pytest.approx(results(want["history"]), rel=1e-6)


@pytest.mark.ray
@pytest.mark.slow  # DDP worker start-up: ~20-30 s here
@pytest.mark.timeout(300)
def test_a_sweep_under_ddp_all_reduces_every_member(store):
    sweep = {"lr": [0.01, 0.05], "head": ["linear", "mlp"]}
    run = raycache.train(cfg(store, epochs=2, num_workers=2, sweep=sweep, run_name="ddp"))
    assert run.spec.num_workers == 2 and len(run.sweep) == 4
    assert all(r["metrics"]["train_rows"] + r["metrics"]["val_rows"] == 600 for r in run.sweep)
    members = state(run)["members"]
    assert run.best["metrics"]["val_acc"] > 0.8
    # the members moved apart (own optimizers), and the saved head is the selected one's
    assert not torch.equal(members[0]["model"]["1.weight"], members[2]["model"]["1.weight"])
    head = run.load_head()
    for k, v in head.model.state_dict().items():
        torch.testing.assert_close(v, members[run.best["member"]]["model"][k])


def test_no_sweep_is_a_single_head_run():
    from raycache.sweep import members

    assert members(TrainConfig(cache="c")) == []
    assert len(members(TrainConfig(cache="c", sweep={"lr": [0.1, 0.2], "dropout": [0.0]}))) == 2

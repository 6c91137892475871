"""Many heads in one pass: a sweep's members train on the same batches (a member ends where a
lone run of its settings ends), each with its own optimizer and early stopping; the best is
saved, every member is recorded, and a sweep resumes from its checkpoint."""

import json
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest
import torch

import raycache
from raycache import ConfigError, RaycacheError
from raycache._heads.modules import standardized
from raycache._heads.specs import HeadSpec, build_head
from raycache._train.config import TrainConfig
from raycache._train.driver.checks import load_config as load_train
from raycache._train.optim import build_optimizer
from raycache._train.sweep.members import Members
from raycache._train.sweep.stack import Stack
from raycache._train.sweep.stack_optim import BUFFERS, UPDATES
from tests.conftest import killed_after_epoch, separable, toy_fill

RESULT_KEYS = ("train_loss", "train_acc", "val_loss", "val_acc")


def test_bad_sweeps_name_the_value_what_was_expected_and_the_fix():
    with pytest.raises(ConfigError) as err:
        load_train({"cache": "c", "sweep": {"epochs": [1, 2], "lr": [], "dropout": 0.1,
                                                   "hidden": [[8], "wide"]}})
    text = str(err.value)
    for part in ("sweep.epochs: not a setting a sweep can vary", "shared by every member",
                 "sweep.lr=[]: expected a non-empty list", "sweep.dropout=0.1",
                 "sweep.hidden[1]='wide': expected a list"):
        assert part in text, text
    with pytest.raises(ConfigError,
                       match=r"sweep member \{'lr': -0.1\}: optim.lr=-0.1: must be > 0"):
        load_train({"cache": "c", "sweep": {"lr": [0.1, -0.1]}})
    with pytest.raises(ConfigError,
                       match=r"sweep member \{'head': 'nope'\}: head='nope': unknown"):
        load_train({"cache": "c", "sweep": {"head": ["linear", "nope"]}})
    with pytest.raises(ConfigError, match="select_mode='up'"):
        load_train({"cache": "c", "select_mode": "up"})


def test_members_module_runs_linear_heads_as_one_product_and_others_alone():
    spec = HeadSpec(head="linear", in_dim=6, num_classes=3, hidden=(5,), dropout=0.0,
                    encoders=("e",), label="y", cache="c", fingerprint="f")
    torch.manual_seed(0)
    heads = [build_head(spec), build_head(HeadSpec(**{**spec.__dict__, "head": "mlp"})),
             build_head(spec)]
    members = Members(heads)
    assert members.stacked == [0, 2] and members.looped == [1]
    x = torch.randn(4, 6)
    for head, out in zip(heads, members(x), strict=True):
        torch.testing.assert_close(out, head(x))


@pytest.mark.parametrize("optimizer", [*sorted(UPDATES), "sgd-nesterov"])
def test_a_stack_steps_each_member_as_its_own_torch_optimizer_would(optimizer):
    name, nesterov = optimizer.removesuffix("-nesterov"), optimizer.endswith("-nesterov")
    settings = [(0.05, 0.0, 0.9, 0.0), (0.01, 0.1, 0.5, 0.1), (0.2, 0.01, 0.0, 0.2),
                (0.02, 0.0, 0.9, 0.0)]  # lr, weight_decay, momentum, label_smoothing
    recipes = [SimpleNamespace(optim=SimpleNamespace(optimizer=name, lr=lr, weight_decay=wd,
                                                     momentum=mom if not nesterov else 0.9,
                                                     nesterov=nesterov, grad_clip=0.5),
                               loss=SimpleNamespace(label_smoothing=ls))
               for lr, wd, mom, ls in settings]
    weights = (1.0, 2.0, 0.5)
    torch.manual_seed(0)
    lone = [torch.nn.Sequential(torch.nn.Dropout(0.0), torch.nn.Linear(6, 3)) for _ in recipes]
    stack = Stack([torch.nn.Sequential(torch.nn.Dropout(0.0), torch.nn.Linear(6, 3))
                   for _ in recipes], recipes, weights)
    [block] = stack.module.blocks
    block.load_from([[head[1]] for head in lone])
    opts = [build_optimizer(head.parameters(), r) for head, r in zip(lone, recipes, strict=True)]
    for t in range(6):
        x, y = torch.randn(16, 6) * 4, torch.randint(0, 3, (16,))
        active = [True, True, True, t < 3]  # the last member stops after 3 steps
        total, values, hits = stack.losses(stack.module(x), y)
        total.backward()
        for i, (head, opt, r) in enumerate(zip(lone, opts, recipes, strict=True)):
            out = head(x)
            loss = torch.nn.functional.cross_entropy(out, y, torch.tensor(weights),
                                                     label_smoothing=r.loss.label_smoothing)
            torch.testing.assert_close(values[i], loss.detach())
            assert hits[i] == (out.argmax(-1) == y).sum()
            if active[i]:
                loss.backward()
                torch.nn.utils.clip_grad_norm_(head.parameters(), r.optim.grad_clip)
                opt.step()
                opt.zero_grad()
        frozen = block.weight[3].clone()
        stack.step(active)
        if not active[3]:
            assert torch.equal(block.weight[3], frozen)
    for i, (head, opt) in enumerate(zip(lone, opts, strict=True)):
        # float rounding differs (one kernel for all members): equal to 1e-5
        torch.testing.assert_close(block.weight[i], head[1].weight, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(block.bias[i], head[1].bias, rtol=1e-5, atol=1e-5)
        mine, theirs = stack.members[i].state_dict()["state"], opt.state_dict()["state"]
        for j in (0, 1):
            buffers = theirs.get(j, {})  # sgd without momentum keeps none
            for k in BUFFERS[name]:
                if buffers.get(k) is not None:
                    torch.testing.assert_close(mine[j][k], buffers[k], rtol=1e-5, atol=1e-5)
            if "step" in buffers:
                assert float(mine[j]["step"]) == float(buffers["step"]) == (6 if i < 3 else 3)
    # a member's state loads back into its slice (resume), and from torch's own optimizer
    saved = stack.members[1].state_dict()
    stack.members[1].load_state_dict(stack.members[2].state_dict())
    stack.members[1].load_state_dict(opts[1].state_dict())
    for k in BUFFERS[name]:
        torch.testing.assert_close(stack.opts[0].state[0][k][1], saved["state"][0][k])


@pytest.mark.parametrize("standardize", [False, True])
@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_mlp_members_stack_by_shape_and_step_as_lone_heads_would(optimizer, standardize):
    spec = HeadSpec(head="mlp", in_dim=6, num_classes=3, hidden=(5, 4), dropout=0.0,
                    encoders=("e",), label="y", cache="c", fingerprint="f",
                    standardize=standardize)
    linear = {"head": "linear", "standardize": False}  # a linear head reads its inputs as is
    shapes = [{"hidden": (5, 4)}, linear, {"hidden": (7,)}, {"hidden": (5, 4)},
              {"hidden": (7,)}, linear]
    recipes = [SimpleNamespace(optim=SimpleNamespace(optimizer=optimizer, lr=lr, weight_decay=wd,
                                                     momentum=0.9, nesterov=False,
                                                     grad_clip=clip),
                               loss=SimpleNamespace(label_smoothing=0.0))
               for lr, wd, clip in [(0.05, 0.0, 0.5), (0.01, 0.1, 0.0), (0.2, 0.01, 0.5),
                                    (0.02, 0.0, 0.0), (0.1, 0.1, 0.0), (0.03, 0.0, 0.5)]]
    torch.manual_seed(0)
    lone = [build_head(HeadSpec(**{**spec.__dict__, **s})) for s in shapes]
    copies = [build_head(HeadSpec(**{**spec.__dict__, **s})) for s in shapes]
    mean, scale = torch.randn(6) * 2, torch.rand(6) * 3 + 0.2  # as the training rows set them
    for head in lone:
        if standardized(head) is not None:
            standardized(head).mean.copy_(mean)
            standardized(head).scale.copy_(scale)
    assert sum(standardized(h) is not None for h in lone) == (4 if standardize else 0)
    for head, copy in zip(lone, copies, strict=True):
        copy.load_state_dict(head.state_dict())
    stack = Stack(copies, recipes, None)
    stack.push()  # the members' weights and input statistics, as before a run's first step
    # three blocks (MLP [5, 4], linear, MLP [7]), the outputs in the members' order
    assert stack.groups == [[0, 3], [1, 5], [2, 4]]
    opts = [build_optimizer(head.parameters(), r) for head, r in zip(lone, recipes, strict=True)]
    for t in range(5):
        x, y = torch.randn(16, 6) * 3 + mean, torch.randint(0, 3, (16,))
        active = [True, True, True, True, t < 2, True]  # member 4 stops after 2 steps
        out = stack.module(x)
        total, values, _ = stack.losses(out, y)
        total.backward()
        for i, (head, opt, r) in enumerate(zip(lone, opts, recipes, strict=True)):
            logits = head(x)
            torch.testing.assert_close(out[:, i].detach(), logits.detach())
            loss = torch.nn.functional.cross_entropy(logits, y)
            torch.testing.assert_close(values[i], loss.detach())
            if active[i]:
                loss.backward()
                if r.optim.grad_clip:
                    torch.nn.utils.clip_grad_norm_(head.parameters(), r.optim.grad_clip)
                opt.step()
                opt.zero_grad()
        stack.step(active)
    stack.pull()  # the stack's weights into each member's own head
    for i, (head, copy) in enumerate(zip(lone, copies, strict=True)):
        for (k, v), (_, w) in zip(head.state_dict().items(), copy.state_dict().items(),
                                  strict=True):
            torch.testing.assert_close(w, v, rtol=1e-5, atol=1e-6, msg=f"member {i} {k}")
        mine, theirs = stack.members[i].state_dict()["state"], opts[i].state_dict()["state"]
        assert len(mine) == len(theirs) == len(list(head.parameters()))
        for j, buffers in theirs.items():
            for k in BUFFERS[optimizer]:
                torch.testing.assert_close(mine[j][k], buffers[k], rtol=1e-5, atol=1e-6)
    # a member's state loads back into its slice (resume) from its lone optimizer's
    stack.members[3].load_state_dict(opts[0].state_dict())
    torch.testing.assert_close(stack.opts[0].state[0][BUFFERS[optimizer][0]][1],
                               opts[0].state_dict()["state"][0][BUFFERS[optimizer][0]])


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
def test_a_sweep_trains_every_member_on_the_same_batches_and_saves_the_best(store,
                                                                           monkeypatch):
    from raycache._train.worker import assemble

    built = []
    monkeypatch.setattr(assemble, "Stack", lambda *a: built.append(Stack(*a)) or built[-1])
    sweep = {"lr": [0.01, 0.05], "head": ["linear", "mlp"], "hidden": [[8], [32]]}
    run = raycache.train(cfg(store, sweep=sweep, run_name="sweep"))
    # one stack: the linear members one block, the MLP members one block per hidden width
    assert [len(g) for g in built[0].groups] == [4, 2, 2]
    rows = run.sweep
    assert len(rows) == 8 and [r["member"] for r in rows] == list(range(8))
    assert rows[7]["settings"] == {"lr": 0.05, "head": "mlp", "hidden": [32]}
    members = state(run)["members"]
    # a member ends exactly where a lone run of its settings (same seed) ends. An mlp member of
    # a sweep holding linear heads starts at random, where a lone mlp starts as the linear
    # solve (its epoch 1), so its twin is the same member in a sweep of two
    lone = raycache.train(cfg(store, lr=0.05, head="mlp", hidden=[32], run_name="lone-mlp"))
    assert lone.history[0].get("start") == "linear (L-BFGS)"
    assert "start" not in rows[7]["history"][0]
    twin = raycache.train(cfg(store, lr=0.05, hidden=[32], sweep={"head": ["linear", "mlp"]},
                              run_name="twin-7"))
    lone = raycache.train(cfg(store, lr=0.05, head="linear", run_name="lone-4"))
    assert not lone.spec.sweep and not lone.sweep  # a plain single-head run
    for i, history, theirs in ((7, twin.sweep[1]["history"], state(twin)["members"][1]),
                               (4, lone.history, state(lone))):
        assert results(rows[i]["history"]) == pytest.approx(results(history), rel=1e-5)
        for key in ("model", "best_weights"):  # its last weights, and the best it serves
            for k, v in theirs[key].items():
                torch.testing.assert_close(members[i][key][k], v, rtol=1e-5, atol=1e-6)
    # linear heads ignore hidden: two members, one head, the same batches, the same weights
    assert results(rows[0]["history"]) == pytest.approx(results(rows[1]["history"]))
    assert results(rows[0]["history"]) != pytest.approx(results(rows[4]["history"]))  # lr
    assert results(rows[4]["history"]) != pytest.approx(results(rows[6]["history"]))  # head
    # the best by select (the monitor: a classifier's val_acc) is the run's head
    best = max(rows, key=lambda r: r["val_acc"])
    assert run.best == best and best["selected"] and sum(r["selected"] for r in rows) == 1
    head = run.load_head()
    assert head.spec.head == best["settings"]["head"]
    for k, v in head.model.state_dict().items():  # its best epoch's weights (weights: best)
        torch.testing.assert_close(v, members[best["member"]]["best_weights"][k])
    assert head.info["sweep"][best["member"]]["selected"]
    settings = " ".join(f"{k}={v}" for k, v in best["settings"].items())
    assert "train sweep of 8 heads over lr, head, hidden on " in run.summary()
    assert f"selected member #{best['member']} {settings}: val_acc" in run.summary()
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
def test_a_sweep_of_linear_heads_trains_as_one_stack_and_each_ends_as_a_lone_run(store,
                                                                                monkeypatch):
    from raycache._train.worker import assemble

    built = []
    monkeypatch.setattr(assemble, "Stack", lambda *a: built.append(Stack(*a)) or built[-1])
    sweep = {"lr": [0.01, 0.05], "label_smoothing": [0.0, 0.1]}
    run = raycache.train(cfg(store, sweep=sweep, grad_clip=1.0, run_name="stacked"))
    assert len(built) == 1 and built[0].module.blocks[0].weight.shape[0] == 4
    members = state(run)["members"]
    for i in (0, 3):
        settings = run.sweep[i]["settings"]
        lone = raycache.train(cfg(store, **settings, grad_clip=1.0, run_name=f"stacked-{i}"))
        assert results(run.sweep[i]["history"]) == pytest.approx(results(lone.history),
                                                                 rel=1e-5)
        lone_state = torch.load(Path(lone.checkpoint) / "state.pt", weights_only=False)
        for k, v in lone_state["model"].items():  # its last weights (its head weights: its best)
            torch.testing.assert_close(members[i]["model"][k], v, rtol=1e-5, atol=1e-5)
    assert len(built) == 1  # lone runs are no stack


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
def test_a_sweep_resumes_from_its_checkpoint(store):
    sweep = {"lr": [0.01, 0.05], "weight_decay": [0.0, 0.1], "head": ["linear", "mlp"]}
    reference = raycache.train(cfg(store, epochs=4, sweep=sweep, run_name="whole"))
    config = cfg(store, epochs=4, sweep=sweep, run_name="broken", checkpoint_every=1,
                 max_failures=0)
    with killed_after_epoch(2), pytest.raises(RaycacheError, match="killed after epoch 2"):
        raycache.train(config)
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
        torch.testing.assert_close(v, members[run.best["member"]]["best_weights"][k])


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_a_64_member_grid_of_linear_and_mlp_heads_trains_in_one_pass(store, monkeypatch):
    from raycache._train.worker import assemble, epoch

    built, steps = [], []
    monkeypatch.setattr(assemble, "Stack", lambda *a: built.append(Stack(*a)) or built[-1])
    real_step = epoch.step
    monkeypatch.setattr(epoch, "step", lambda heads: steps.append(1) or real_step(heads))
    sweep = {"head": ["linear", "mlp"], "lr": [0.003, 0.01, 0.03, 0.1],
             "weight_decay": [0.0, 0.01, 0.1, 0.3], "hidden": [[8], [16]]}
    run = raycache.train(cfg(store, epochs=2, sweep=sweep, run_name="grid64"))
    assert len(run.sweep) == 64 and len(built) == 1
    stack = built[0]
    assert sorted(len(g) for g in stack.groups) == [16, 16, 32]  # linear, MLP [8], MLP [16]
    # one pass: one step per batch for all 64 members
    train_rows = run.sweep[0]["metrics"]["train_rows"]
    assert len(steps) == 2 * -(-train_rows // 32)
    assert all(r["epochs"] == 2 and not r["diverged"] for r in run.sweep)
    assert run.best["metrics"]["val_acc"] > 0.8
    head = run.load_head()  # the selected member's head, as a lone run's
    member = state(run)["members"][run.best["member"]]
    for k, v in head.model.state_dict().items():
        torch.testing.assert_close(v, member["best_weights"][k])


def test_no_sweep_is_a_single_head_run():
    from raycache._train.sweep.grid import members

    assert members(TrainConfig(cache="c")) == []
    assert len(members(TrainConfig(cache="c", sweep={"lr": [0.1, 0.2], "dropout": [0.0]}))) == 2


def test_mlp_members_of_one_shape_run_as_batched_products_equal_to_lone_heads():
    spec = HeadSpec(head="mlp", in_dim=6, num_classes=3, hidden=(5, 4), dropout=0.0,
                    encoders=("e",), label="y", cache="c", fingerprint="f")
    torch.manual_seed(0)
    wide = HeadSpec(**{**spec.__dict__, "hidden": (7,)})
    heads = [build_head(spec), build_head(wide), build_head(spec), build_head(spec),
             build_head(HeadSpec(**{**spec.__dict__, "head": "linear"}))]
    members = Members(heads)
    assert members.grouped == [[0, 2, 3]] and members.looped == [1] and members.stacked == [4]
    x = torch.randn(9, 6)
    outs = members(x)
    lone = [head(x) for head in heads]
    for out, want in zip(outs, lone, strict=True):
        torch.testing.assert_close(out, want)  # forward, to float rounding
    sum(o.square().sum() for o in outs).backward()
    grads = [[p.grad.clone() for p in h.parameters()] for h in heads]
    members.zero_grad()
    sum(w.square().sum() for w in lone).backward()  # the lone heads' own graphs
    for head, got in zip(heads, grads, strict=True):
        for p, g in zip(head.parameters(), got, strict=True):
            torch.testing.assert_close(g, p.grad)
    assert members(torch.randn(2, 3, 6))[0].shape == (2, 3, 3)  # any leading shape

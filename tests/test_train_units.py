"""Training pieces without a cluster: WorkerSpec, HeadSpec, optimizers, schedules, the step
(accumulation, no_sync, clipping, precision, compile fallback), checkpoints, logs, load_head."""

import dataclasses
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.distributed as dist

from raycache._cache.store import Store
from raycache._core.config import load
from raycache._errors import ConfigError
from raycache._heads.specs import HEAD_CONFIG, HeadSpec, build_head
from raycache._train.config import LossConfig, TrainConfig
from raycache._train.driver.plan import load_config as load_train
from raycache._train.folder import checkpoints as ckpt
from raycache._train.folder.metrics import CURVES, METRICS, TENSORBOARD, write_artifacts
from raycache._train.optim import OPTIMIZERS, SCHEDULES, Schedule, build_optimizer
from raycache._train.runspec import Recipe, WorkerSpec, digest
from tests.conftest import free_port

HEAD = HeadSpec(head="linear", in_dim=4, num_classes=3, hidden=(), dropout=0.0,
                encoders=("e",), label="label", cache="c", fingerprint="f" * 24,
                encoder_configs={"e": {"name": "e", "kind": "torch", "input": "x"}},
                weights_digests={"e": "d" * 64})


def recipe(**over) -> Recipe:
    return Recipe.from_config(load(TrainConfig, {"cache": "c", **over}))


def spec(tmp_path, **over) -> WorkerSpec:
    return WorkerSpec(head=HEAD, recipe=recipe(**over), run_name="r", key="id", rows=64,
                   placement="cpu", num_workers=0, use_gpu=False, class_weights=None,
                   store=Store(str(tmp_path)), shards=(), run_dir=str(tmp_path / "run"),
                   checkpoint_every=0, checkpoint_seconds=0, prefetch_batches=1, progress=False)


def test_runspec_is_frozen_and_its_digest_follows_what_decides_the_result(tmp_path):
    s = spec(tmp_path)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.placement = "gpu"
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.recipe.optim.lr = 1.0
    assert s.digest() == spec(tmp_path).digest() == digest(HEAD, recipe())
    assert spec(tmp_path, lr=0.5).digest() != s.digest()
    assert dataclasses.replace(s, placement="stream").digest() == s.digest()  # placement: how,
    record = json.dumps(s.record())  # not what; and the record never holds the store
    assert str(tmp_path) not in record and "options" not in record


def test_what_a_user_reads_of_a_run_spec_holds_no_plumbing_and_digests_the_same(tmp_path):
    from raycache._train.runspec import Member, RunSpec

    lone = spec(tmp_path)
    swept = dataclasses.replace(lone, sweep=tuple(
        Member((("optim.lr", lr), ("hidden", (8,))), lone.head, lone.recipe)
        for lr in (0.1, 0.01)), select="val_acc", select_mode="max")
    for s in (lone, swept):
        view = s.view()
        assert isinstance(view, RunSpec) and view.digest() == s.digest()
        assert (view.run_name, view.run_dir, view.recipe) == (s.run_name, s.run_dir, s.recipe)
    assert swept.view().sweep == ({"optim.lr": 0.1, "hidden": [8]},
                                  {"optim.lr": 0.01, "hidden": [8]})
    plumbing = {"store", "shards", "checks", "keeps", "filling", "checkpoint_every",
                "checkpoint_seconds", "prefetch_batches", "progress", "key", "tracking"}
    fields = {f.name for f in dataclasses.fields(RunSpec)}
    assert not fields & plumbing
    assert fields | plumbing == {f.name for f in dataclasses.fields(WorkerSpec)}


def test_the_plan_reads_each_column_of_the_cache_once():
    """A cache without label_stats whose labels have nulls: the stats, then the null rows'
    keys, read the label column once and the key column once."""
    import pyarrow as pa

    from raycache._train.driver.columns import Columns
    from raycache._train.driver.plan import class_counts

    table = pa.table({"id": ["a", "b", "c"], "label": pa.array([0, None, 1], pa.int64())})
    asked = []

    def read_table(columns, verify=True):
        asked.append(tuple(columns))
        return table.select(columns)

    manifest = SimpleNamespace(name="c", rows=3, key_column="id", label_columns=["label"],
                               label_types={"label": "int64"}, label_stats={})
    cache = SimpleNamespace(manifest=manifest, read_table=read_table)
    with pytest.raises(ConfigError, match=r"null in 1 row\(s\) \(keys \['b'\]"):
        class_counts(load_train({"cache": "c"}), cache, [], Columns(cache))
    assert sorted(asked) == [("id",), ("label",)]
    filling = Columns(cache, lambda name: table.column(name))
    assert filling.filling and filling("id") is filling("id") and len(asked) == 2


def test_headspec_round_trip_and_version_check():
    assert HeadSpec.from_dict(json.loads(json.dumps(HEAD.to_dict()))) == HEAD
    with pytest.raises(ConfigError, match="format_version=99"):
        HeadSpec.from_dict({**HEAD.to_dict(), "format_version": 99})
    assert build_head(HEAD)(torch.zeros(2, 4)).shape == (2, 3)


def test_config_problems_name_value_expectation_and_fix():
    with pytest.raises(ConfigError) as err:
        load_train({"cache": "c", "optimizer": "lamb", "schedule": "poly",
                           "precision": "float16", "num_workers": -1, "class_weights": "inverse",
                           "mode": "up", "label_smoothing": 1.0})
    text = str(err.value)
    for part in ("optim.optimizer='lamb'", "schedule.kind='poly'",
                 "optim.precision='float16' needs a GPU",
                 "use optim.precision: bfloat16 on CPU", "resources.num_workers=-1",
                 "loss.class_weights='inverse'",
                 "mode='up'", "label_smoothing=1.0"):
        assert part in text, text
    assert load_train({"cache": "c", "num_workers": 0}).resources.num_workers == 0
    assert load_train({"cache": "c"}).resources.num_workers == "auto"


def test_a_monitor_or_select_that_names_no_metric_is_refused_before_any_work():
    with pytest.raises(ConfigError) as err:  # the config alone: no cache, no Ray
        load_train({"cache": "c", "monitor": "val_acc1", "select": "val_top5",
                    "sweep": {"optim.lr": [0.1, 0.01]}})
    text = str(err.value)
    assert "evaluation.monitor='val_acc1' is not a metric of objective 'classification'" in text
    assert "select='val_top5' is not a metric" in text and "'val_top5_acc'" in text
    for objective, monitor in (("classification", "val_f1"), ("classification", "val_top5_acc"),
                               ("classification", "train_loss"), ("groups", "val_map_at_10"),
                               ("groups", "val_r_precision"), ("pairs", "val_auc")):
        cfg = load_train({"cache": "c", "objective": objective, "monitor": monitor,
                          **({"pairs": {"path": "p.parquet"}} if objective == "pairs" else {})})
        assert cfg.evaluation.monitor == monitor
    with pytest.raises(ConfigError, match="'val_mrr' is not a metric of objective 'pairs'"):
        load_train({"cache": "c", "objective": "pairs", "monitor": "val_mrr",
                    "pairs": {"path": "p.parquet", "loss": "cosine"}})


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_every_optimizer_reduces_the_loss(name):
    torch.manual_seed(0)
    x, y = torch.randn(64, 4), torch.randint(0, 3, (64,))
    model = build_head(HEAD)
    r = recipe(optimizer=name, lr=0.05, nesterov=name == "sgd")
    opt = build_optimizer(model.parameters(), r)
    before = torch.nn.functional.cross_entropy(model(x), y).item()
    for _ in range(30):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < before
    if name == "sgd":
        assert opt.param_groups[0]["nesterov"] and opt.param_groups[0]["momentum"] == 0.9
    with pytest.raises(ConfigError, match="nesterov=true needs momentum > 0"):  # before Ray
        recipe(optimizer="sgd", nesterov=True, momentum=0)


def lrs(r: Recipe, spe: int, epoch_values=None) -> list[float]:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=r.optim.lr)
    s = Schedule(opt, r, spe)
    out = []
    for epoch in range(r.loop.epochs):
        for _ in range(spe):
            out.append(opt.param_groups[0]["lr"])
            s.step_batch()
        if epoch_values:
            s.step_epoch(epoch_values[epoch], r.better)
    return out


def test_schedules_with_warmup():
    assert set(SCHEDULES) == {"constant", "cosine", "linear", "one-cycle", "step", "plateau"}
    const = lrs(recipe(lr=0.1, epochs=2, warmup_steps=4), spe=10)
    assert const[:4] == pytest.approx([0.02, 0.04, 0.06, 0.08]) and set(const[4:]) == {0.1}
    cos = lrs(recipe(lr=0.1, epochs=3, schedule="cosine"), spe=10)
    assert cos[0] == pytest.approx(0.1) and all(a >= b for a, b in zip(cos, cos[1:], strict=False))
    assert cos[-1] < 0.001
    lin = lrs(recipe(lr=0.1, epochs=2, schedule="linear"), spe=10)
    assert lin[10] == pytest.approx(0.05)
    step = lrs(recipe(lr=0.1, epochs=4, schedule="step", step_epochs=2, gamma=0.5), spe=5)
    assert step[9] == pytest.approx(0.1) and step[10] == pytest.approx(0.05)
    assert step[19] == pytest.approx(0.05)
    one = lrs(recipe(lr=0.1, epochs=10, schedule="one-cycle"), spe=10)
    peak = int(np.argmax(one))
    assert one[0] == pytest.approx(0.004) and max(one) == pytest.approx(0.1)
    assert 25 <= peak <= 31 and one[-1] < 0.001
    flat = [1.0, 0.9, 0.9, 0.9, 0.9, 0.9]  # val_loss stops improving after epoch 2
    plat = lrs(recipe(lr=0.1, epochs=6, schedule="plateau", plateau_patience=2, gamma=0.1,
                      monitor="val_loss"),
               spe=1, epoch_values=flat)
    assert plat == pytest.approx([0.1, 0.1, 0.1, 0.1, 0.01, 0.01])


def data(n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return x, (x[:, 0] > 0).long() + (x[:, 1] > 1).long()


class Fixed:
    """A data holder yielding the same batches in order (like InMemory with seed None)."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.y)

    def batches(self, batch_size, seed, then=None):
        for i in range(0, len(self.y), batch_size):
            yield self.x[i:i + batch_size], self.y[i:i + batch_size]


def one_epoch(tmp_path, model=None, **over):
    from raycache._train.worker.assemble import build_parts
    from raycache._train.worker.epoch import SLOTS, train_epoch
    from raycache._train.worker.heads import WorkerHeads

    s = spec(tmp_path, optimizer="sgd", momentum=0.0, lr=0.5, **over)
    torch.manual_seed(0)
    parts = build_parts(s, torch.device("cpu"), 64)
    if model is not None:
        parts.model = model(parts.base)
    sums = torch.zeros(SLOTS, dtype=torch.float64)
    train_epoch(WorkerHeads.of(parts), Fixed(*data()), seed=0, sums=sums)
    return parts, sums


def test_heads_step_fused_on_a_gpu_and_in_a_sweep_per_tensor_alone_on_a_cpu(tmp_path):
    import dataclasses

    from raycache._train.runspec import Member
    from raycache._train.worker.assemble import build_parts, fused_for

    lone = spec(tmp_path)
    swept = dataclasses.replace(lone, sweep=tuple(
        Member((("lr", lr),), lone.head, lone.recipe) for lr in (0.1, 0.01)))
    assert fused_for(lone, torch.device("cuda")) and fused_for(swept, torch.device("cpu"))
    assert not fused_for(lone, torch.device("cpu"))
    opt = build_parts(lone, torch.device("cpu"), 64, fused=True).opt
    assert opt.param_groups[0]["fused"]


def test_gradient_accumulation_equals_the_larger_batch(tmp_path):
    big, _ = one_epoch(tmp_path, batch_size=32)
    accum, sums = one_epoch(tmp_path, batch_size=16, grad_accum=2)
    assert sums[2] == 64 and accum.schedule.step_no == big.schedule.step_no == 2
    for a, b in zip(accum.base.parameters(), big.base.parameters(), strict=True):
        torch.testing.assert_close(a, b)


def test_accumulating_steps_skip_the_ddp_all_reduce(tmp_path):
    calls = []

    def hook(state, bucket):
        calls.append(1)
        fut = torch.futures.Future()
        fut.set_result(bucket.buffer())
        return fut

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1)
    try:
        def ddp(module):
            wrapped = torch.nn.parallel.DistributedDataParallel(module)
            wrapped.register_comm_hook(None, hook)
            return wrapped

        parts, _ = one_epoch(tmp_path, model=ddp, batch_size=8, grad_accum=4)
    finally:
        dist.destroy_process_group()
    assert parts.schedule.step_no == 2  # 8 micro-batches, 4 per step
    assert len(calls) == 2  # one all-reduce per optimizer step, none on the 6 others


def test_gradient_clipping_bounds_the_update(tmp_path):
    parts, _ = one_epoch(tmp_path, batch_size=64, grad_clip=1e-3)
    torch.manual_seed(0)
    start = build_head(HEAD).state_dict()
    moved = torch.cat([(p - start[n]).flatten() for n, p in parts.base.named_parameters()])
    assert 0 < moved.norm() <= 0.5 * 1e-3 * 1.0001  # lr 0.5 x clipped norm


def test_bf16_autocast_trains_on_cpu(tmp_path):
    parts, sums = one_epoch(tmp_path, batch_size=16, precision="bfloat16")
    assert sums[2] == 64 and torch.isfinite(sums[0])
    from raycache._train.worker.epoch import autocast

    with autocast(parts):
        assert parts.base(torch.zeros(1, 4)).dtype == torch.bfloat16


def test_fp16_on_a_cpu_worker_is_a_clear_error(tmp_path):
    from raycache._train.worker.assemble import build_parts

    with pytest.raises(RuntimeError, match="float16' needs a CUDA device.*bfloat16"):
        build_parts(spec(tmp_path, precision="float16", use_gpu=True), torch.device("cpu"), 64)


def test_compile_falls_back_to_eager_with_a_message(monkeypatch, capsys):
    from raycache._train.worker.assemble import compile_or_eager

    def broken(model):
        raise RuntimeError("no backend here")

    monkeypatch.setattr(torch, "compile", broken)
    model = build_head(HEAD)
    assert compile_or_eager(model, 4, torch.device("cpu")) is model
    assert "could not compile the head here (RuntimeError: no backend here); training in " \
           "eager mode" in capsys.readouterr().out


def test_label_smoothing_and_class_weights_change_the_loss(tmp_path):
    plain = one_epoch(tmp_path, batch_size=64)[1][0]
    smooth = one_epoch(tmp_path, batch_size=64, label_smoothing=0.3)[1][0]
    assert smooth != plain
    from raycache._train.driver.plan import class_weights

    cfg = TrainConfig(cache="c", loss=LossConfig(class_weights="balanced"))
    assert class_weights(cfg, np.array([30, 10, 20])) == pytest.approx((60 / 90, 2.0, 1.0))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_empty_cache_every_and_fp16_on_gpu(tmp_path, monkeypatch):
    from raycache._train.worker.assemble import build_parts
    from raycache._train.worker.epoch import SLOTS, train_epoch
    from raycache._train.worker.heads import WorkerHeads

    calls = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append(1))
    s = dataclasses.replace(spec(tmp_path, precision="float16", empty_cache_every=2,
                                 batch_size=8, use_gpu=True), use_gpu=True)
    parts = build_parts(s, torch.device("cuda"), 64)
    x, y = data()
    train_epoch(WorkerHeads.of(parts), Fixed(x.cuda(), y.cuda()), 0,
                torch.zeros(SLOTS, dtype=torch.float64, device="cuda"))
    assert parts.scaler.is_enabled() and len(calls) == 4  # 8 steps, every 2nd


def test_checkpoint_folder_holds_the_whole_state_and_load_head_needs_no_ray(tmp_path):
    model = build_head(HEAD)
    state = {"model": model.state_dict(), "rng": ckpt.rng_state(), "progress": {"epoch": 3}}
    local = tmp_path / "tmp"
    local.mkdir()
    ckpt.write_folder(str(local), HEAD, model.state_dict(), state, {"metrics": {"val_acc": 1}})
    store = Store(str(tmp_path / "store"))
    run = store.path("run")
    ckpt.upload(store, str(local), f"{run}/{ckpt.checkpoint_name(3)}")
    ckpt.upload(store, str(local), f"{run}/{ckpt.checkpoint_name(7)}")
    os.remove(f"{run}/{ckpt.checkpoint_name(7)}/{ckpt.STATE}")  # a torn checkpoint
    found = ckpt.latest(store, run)
    assert found.endswith("checkpoint_000003")
    assert ckpt.read_state(store, found)["progress"] == {"epoch": 3}
    saved = json.loads(store.read_bytes(f"{found}/{HEAD_CONFIG}"))
    assert saved["head"]["encoder_configs"]["e"]["kind"] == "torch"
    code = ("import sys; from raycache._heads.loaded import load_head; "
            f"h = load_head({found!r}); print(h.predict_embeddings([[0, 0, 0, 1]]).tolist()); "
            "assert not any(m == 'ray' or m.startswith('ray.') for m in sys.modules), 'ray'")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ}, timeout=120)
    assert out.returncode == 0, out.stderr
    expected = model(torch.tensor([[0.0, 0, 0, 1]])).argmax(1).tolist()
    assert out.stdout.strip() == str(expected)
    ckpt.prune(store, run, keep=1)
    assert store.listdir(run) == ["checkpoint_000007"]


def test_run_artifacts_metrics_tensorboard_and_curves(tmp_path):
    history = [{"epoch": e, "train_loss": 1 / e, "val_loss": 1.1 / e, "train_acc": 0.5,
                "val_acc": 0.4 + e / 10, "placement": "cpu"} for e in (1, 2, 3)]
    store = Store(str(tmp_path))
    write_artifacts(store, str(tmp_path), history)
    lines = (tmp_path / METRICS).read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [1, 2, 3]
    assert (tmp_path / CURVES).read_bytes()[:4] == b"\x89PNG"
    (events,) = (tmp_path / TENSORBOARD).iterdir()
    assert scalars(events.read_bytes(), "val_acc") == pytest.approx([0.5, 0.6, 0.7])


def scalars(blob: bytes, tag: str) -> list[float]:
    """Values of one tag in a TFRecord event file (length, crc, Event proto, crc)."""
    import struct

    from tensorboardX.proto import event_pb2

    out, i = [], 0
    while i < len(blob):
        (n,) = struct.unpack("<Q", blob[i:i + 8])
        event = event_pb2.Event.FromString(blob[i + 12:i + 12 + n])
        out += [v.simple_value for v in event.summary.value if v.tag == tag]
        i += 12 + n + 4
    return out


def write_shards(folder, sizes, seed) -> tuple[tuple[str, int], ...]:
    """Shards of (id, label, a 4-float embedding "e") with these row counts: (path, rows)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    shards = []
    for i, n in enumerate(sizes):
        emb = rng.normal(size=(n, 4)).astype(np.float32)
        table = pa.table({"id": [f"r{i}-{j}" for j in range(n)],
                          "label": pa.array(rng.integers(0, 3, n)),
                          "e": pa.FixedSizeListArray.from_arrays(pa.array(emb.ravel()), 4)})
        pq.write_table(table, folder / f"s{i}.parquet")
        shards.append((str(folder / f"s{i}.parquet"), n))
    return tuple(shards)


def test_streamed_share_sees_each_row_once_and_matches_the_in_memory_split(tmp_path):
    from raycache._train.data.in_memory import InMemory
    from raycache._train.data.streamed import Streamed

    shards = write_shards(tmp_path, (50, 70, 30), seed=0)
    base = dataclasses.replace(spec(tmp_path), rows=150, shards=shards, num_workers=2,
                               prefetch_batches=2)
    for rank in (0, 1):
        mem_train, mem_val = InMemory.for_worker(base, rank, torch.device("cpu"))
        for validation, mem in ((False, mem_train), (True, mem_val)):
            stream = Streamed(base, rank, validation, torch.device("cpu"))
            epoch = [torch.cat(t) for t in zip(*stream.batches(16, seed=3), strict=True)]
            again = [torch.cat(t) for t in zip(*stream.batches(16, seed=4), strict=True)]
            assert len(stream) == len(mem) > 0
            key = lambda x: sorted(map(tuple, x.tolist()))  # noqa: E731
            assert key(epoch[0]) == key(mem.x) == key(again[0])  # the same rows, each once
            assert not torch.equal(epoch[0], again[0])  # in another order each epoch


def test_streamed_share_reads_the_next_pass_ahead_with_the_same_rows_in_the_same_order(
        tmp_path):
    from raycache._train.data.streamed import Streamed

    shards = write_shards(tmp_path, (40, 40, 40), seed=1)
    base = dataclasses.replace(spec(tmp_path), rows=120, shards=shards, prefetch_batches=2)
    ahead = Streamed(base, 0, False, torch.device("cpu"))
    fresh = Streamed(base, 0, False, torch.device("cpu"))
    for epoch in range(3):
        got = list(ahead.batches(16, seed=epoch, then=epoch + 1))
        assert ahead.ahead is not None and ahead.ahead[0] == epoch + 1  # next pass under way
        assert len(ahead.ahead[1]) == 2
        want = list(fresh.batches(16, seed=epoch))  # no read-ahead: the reference
        assert len(got) == len(want)
        for (x, y), (wx, wy) in zip(got, want, strict=True):
            assert torch.equal(x, wx) and torch.equal(y, wy)
    # a pass with another seed than the one read ahead for discards the read-ahead
    other = [torch.cat(t) for t in zip(*ahead.batches(16, seed=99), strict=True)]
    ref = [torch.cat(t) for t in zip(*fresh.batches(16, seed=99), strict=True)]
    assert torch.equal(other[0], ref[0])
    # validation passes (seed None) always read the next pass ahead
    val = Streamed(base, 0, True, torch.device("cpu"))
    first = [torch.cat(t) for t in zip(*val.batches(64, seed=None), strict=True)]
    assert val.ahead is not None and val.ahead[0] is None
    second = [torch.cat(t) for t in zip(*val.batches(64, seed=None), strict=True)]
    assert torch.equal(first[0], second[0])


def test_every_recipe_group_setting_is_part_of_the_digest_and_flat_keys_still_load(tmp_path):
    from raycache._train.config import FLAT, GROUPS
    from raycache._train.sweep.grid import KEYS

    settings = dataclasses.asdict(recipe())
    for f in dataclasses.fields(Recipe):
        if dataclasses.is_dataclass(f.type) or f.name in GROUPS:
            group = settings[f.name]
            for g in dataclasses.fields(GROUPS.get(f.name, type(getattr(recipe(), f.name)))):
                assert g.name in group or (f.name, g.name) in {("optim", "encoder_lr"),
                                                               ("pairs", g.name)}
    flat = load_train({"cache": "c", "lr": 0.01, "schedule": "cosine", "checkpoint_every": 2,
                       "patience": 3, "sweep": {"lr": [0.1, 0.2]}})
    grouped = load_train({"cache": "c", "optim": {"lr": 0.01}, "schedule": {"kind": "cosine"},
                          "checkpoints": {"every": 2}, "evaluation": {"patience": 3},
                          "sweep": {"lr": [0.1, 0.2]}})
    assert flat == grouped and FLAT["lr"] == ("optim", "lr")
    assert {"optim.lr", "optim.weight_decay", "head", "groups.loss"} <= set(KEYS)
    assert digest(HEAD, recipe(lr=0.5)) != digest(HEAD, recipe())
    assert digest(HEAD, recipe(gamma=0.5)) != digest(HEAD, recipe())


def test_a_streamed_share_leaves_its_readers_cores_and_a_run_gives_them_back(tmp_path):
    import pyarrow.parquet as pq

    import raycache
    from raycache._train.data.streamed import READERS
    from raycache._train.worker.assemble import data_sources
    from tests.conftest import separable, toy_fill

    before = torch.get_num_threads()
    torch.set_num_threads(READERS + 1)
    try:
        s = dataclasses.replace(spec(tmp_path), placement="stream", shards=(), rows=0)
        data_sources(s, 0, torch.device("cpu"))
        cores = min(READERS + 1, os.cpu_count() or 1)
        assert torch.get_num_threads() == max(1, cores - READERS)

        torch.set_num_threads(READERS + 1)  # an in-process run restores the caller's threads
        (tmp_path / "src").mkdir()
        pq.write_table(separable(n=200), tmp_path / "src" / "a.parquet")
        raycache.fill(toy_fill(str(tmp_path / "src"), str(tmp_path / "store"), in_process=True))
        run = raycache.train({"cache": "toy", "store": {"uri": str(tmp_path / "store")},
                              "epochs": 1, "num_workers": 0, "placement": "stream",
                              "progress": False})
        assert run.spec.placement == "stream" and len(run.history) == 1
        assert torch.get_num_threads() == READERS + 1
    finally:
        torch.set_num_threads(before)


def test_the_key_split_is_zlib_crc32_of_each_keys_text_whatever_its_length_or_type():
    import zlib

    import pyarrow as pa

    from raycache._fit.split import BUCKETS, validation_mask

    keys = [pa.array(np.arange(-1000, 20_000, 7, dtype=np.int64)),
            pa.array(["", "é", "日本語", "x" * 64, "y" * 65, "row-17"]),
            pa.chunked_array([pa.array(["k1", "k22"]), pa.array(["k333"])]),
            pa.array([1.5, 2.0, -3.25])]  # no vectorised form: zlib key by key
    for column in keys:
        want = [zlib.crc32(str(k).encode()) % BUCKETS < 3_000 for k in column.to_pylist()]
        assert validation_mask(column, 0.3).to_pylist() == want


def test_an_in_memory_share_gathers_each_sides_rows_in_order_from_every_shard(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from raycache._fit.split import validation_mask
    from raycache._train.data.in_memory import InMemory

    rng = np.random.default_rng(1)
    shards, tables = [], []
    for i, n in enumerate((40, 25)):
        a = rng.normal(size=(n, 3)).astype(np.float32)
        b = rng.normal(size=(n, 2)).astype(np.float16)
        table = pa.table({"id": [f"r{i}-{j}" for j in range(n)],
                          "label": pa.array(rng.integers(0, 3, n)),
                          "e": pa.FixedSizeListArray.from_arrays(pa.array(a.ravel()), 3),
                          "f": pa.FixedSizeListArray.from_arrays(pa.array(b.ravel()), 2)})
        pq.write_table(table, tmp_path / f"s{i}.parquet")
        shards.append((str(tmp_path / f"s{i}.parquet"), n))
        tables.append(table)
    whole = pa.concat_tables(tables)
    held = validation_mask(whole.column("id"), 0.3).to_numpy(zero_copy_only=False)
    assert 0 < held.sum() < len(held)
    for encoders, dims in ((("e",), [3]), (("e", "f"), [3, 2])):
        base = spec(tmp_path, val_fraction=0.3)
        base = dataclasses.replace(base, rows=65, shards=tuple(shards), checks=(),
                                   head=dataclasses.replace(base.head, encoders=encoders,
                                                            in_dim=sum(dims)))
        train, val = InMemory.for_worker(base, 0, torch.device("cpu"))
        x = np.concatenate([np.stack(whole.column(e).to_numpy(zero_copy_only=False))
                            .astype(np.float32) for e in encoders], axis=1)
        y = whole.column("label").to_numpy()
        assert torch.equal(train.x, torch.from_numpy(x[~held]))
        assert torch.equal(val.x, torch.from_numpy(x[held]))
        assert torch.equal(train.y, torch.from_numpy(y[~held]))
        assert torch.equal(val.y, torch.from_numpy(y[held]))


def test_a_streamed_validation_side_keeps_its_rows_from_the_first_training_pass(
        tmp_path, monkeypatch):
    from raycache._train.data import streamed
    from raycache._train.data.in_memory import InMemory

    shards = write_shards(tmp_path, (50, 70, 30), seed=2)
    base = dataclasses.replace(spec(tmp_path), rows=150, shards=shards, checks=())
    cpu = torch.device("cpu")
    _, want = InMemory.for_worker(base, 0, cpu)

    monkeypatch.setattr(streamed, "KEPT_VALIDATION_BYTES", 0)  # too large to keep: read again
    train, val = streamed.Streamed.for_worker(base, 0, cpu)
    assert train.hands_to is None
    list(train.batches(16, seed=1))
    assert torch.equal(torch.cat([x for x, _ in val.batches(16, seed=None)]), want.x)

    monkeypatch.undo()
    train, val = streamed.Streamed.for_worker(base, 0, cpu)
    assert train.hands_to is val
    list(train.batches(16, seed=1))  # the first pass hands each piece's validation rows over
    for path, _ in shards:
        os.remove(path)  # so a validation read of any shard would fail
    for _ in range(2):
        x, y = (torch.cat(t) for t in zip(*val.batches(16, seed=None), strict=True))
        assert torch.equal(x, want.x) and torch.equal(y, want.y)


def test_train_takes_the_old_landing_keyword_with_a_deprecation_warning():
    import raycache

    with pytest.warns(DeprecationWarning, match="pass filling="), pytest.raises(ConfigError):
        raycache.train({"cache": "c", "head": "nope"}, landing=object())  # then refused
    with pytest.raises(TypeError, match="filling= alone"):
        raycache.train({"cache": "c"}, landing=object(), filling=object())

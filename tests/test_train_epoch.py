"""A worker's epoch without a cluster (raycache._train.worker.epoch): the step (accumulation,
no_sync, clipping, precision, compile fallback) and the loss's settings."""


import numpy as np
import pytest
import torch
import torch.distributed as dist

from raycache._heads.specs import build_head
from raycache._train.config import LossConfig, TrainConfig
from tests.conftest import free_port
from tests.train_specs import HEAD, spec


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
    from raycache._train.worker.assemble import build_kit
    from raycache._train.worker.epoch import SLOTS, train_epoch
    from raycache._train.worker.heads import WorkerHeads

    s = spec(tmp_path, optimizer="sgd", momentum=0.0, lr=0.5, **over)
    torch.manual_seed(0)
    kit = build_kit(s, torch.device("cpu"), 64)
    if model is not None:
        kit.model = model(kit.base)
    sums = torch.zeros(SLOTS, dtype=torch.float64)
    train_epoch(WorkerHeads.of(kit), Fixed(*data()), seed=0, sums=sums)
    return kit, sums


def test_heads_step_fused_on_a_gpu_and_in_a_sweep_per_tensor_alone_on_a_cpu(tmp_path):

    from raycache._train.runspec import Member
    from raycache._train.worker.assemble import build_kit, fused_for

    lone = spec(tmp_path)
    swept = lone.replace(sweep=tuple(
        Member((("lr", lr),), lone.head, lone.recipe) for lr in (0.1, 0.01)))
    assert fused_for(lone, torch.device("cuda")) and fused_for(swept, torch.device("cpu"))
    assert not fused_for(lone, torch.device("cpu"))
    opt = build_kit(lone, torch.device("cpu"), 64, fused=True).opt
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

        kit, _ = one_epoch(tmp_path, model=ddp, batch_size=8, grad_accum=4)
    finally:
        dist.destroy_process_group()
    assert kit.schedule.step_no == 2  # 8 micro-batches, 4 per step
    assert len(calls) == 2  # one all-reduce per optimizer step, none on the 6 others


def test_gradient_clipping_bounds_the_update(tmp_path):
    kit, _ = one_epoch(tmp_path, batch_size=64, grad_clip=1e-3)
    torch.manual_seed(0)
    start = build_head(HEAD).state_dict()
    moved = torch.cat([(p - start[n]).flatten() for n, p in kit.base.named_parameters()])
    assert 0 < moved.norm() <= 0.5 * 1e-3 * 1.0001  # lr 0.5 x clipped norm


def test_bf16_autocast_trains_on_cpu(tmp_path):
    kit, sums = one_epoch(tmp_path, batch_size=16, precision="bfloat16")
    assert sums[2] == 64 and torch.isfinite(sums[0])
    from raycache._train.worker.epoch import autocast

    with autocast(kit):
        assert kit.base(torch.zeros(1, 4)).dtype == torch.bfloat16


def test_fp16_on_a_cpu_worker_is_a_clear_error(tmp_path):
    from raycache._train.worker.assemble import build_kit

    with pytest.raises(RuntimeError, match="float16' needs a CUDA device.*bfloat16"):
        build_kit(spec(tmp_path, precision="float16", use_gpu=True), torch.device("cpu"), 64)


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
    from raycache._train.worker.assemble import build_kit
    from raycache._train.worker.epoch import SLOTS, train_epoch
    from raycache._train.worker.heads import WorkerHeads

    calls = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append(1))
    s = spec(tmp_path, precision="float16", empty_cache_every=2, batch_size=8,
             use_gpu=True).replace(use_gpu=True)
    kit = build_kit(s, torch.device("cuda"), 64)
    x, y = data()
    train_epoch(WorkerHeads.of(kit), Fixed(x.cuda(), y.cuda()), 0,
                torch.zeros(SLOTS, dtype=torch.float64, device="cuda"))
    assert kit.scaler.is_enabled() and len(calls) == 4  # 8 steps, every 2nd

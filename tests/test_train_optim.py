"""Optimizers and schedules (raycache._train.optim)."""


import numpy as np
import pytest
import torch

from raycache import ConfigError
from raycache._heads.specs import build_head
from raycache._train.optim import OPTIMIZERS, SCHEDULES, Schedule, build_optimizer
from raycache._train.runspec import Recipe
from tests.train_specs import HEAD, recipe


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

"""The default stopping rule follows the metric a run reports: a classifier monitors val_acc
(evaluation.monitor: auto), so a run whose val_loss rises while its accuracy still rises keeps
training and serves its best-accuracy epoch; the other objectives still monitor val_loss."""

from types import SimpleNamespace

import pytest
import torch

from raycache import ConfigError
from raycache._core.config import load
from raycache._train.config import TrainConfig
from raycache._train.driver.checks import load_config
from raycache._train.runspec import Recipe
from raycache._train.worker.best_epoch import track_best
from raycache._train.worker.heads import Progress

pytestmark = [pytest.mark.timeout(60)]


def recipe(**over) -> Recipe:
    return Recipe.from_config(load(TrainConfig, {"cache": "c", **over}), 2000, 0)


class Schedule:
    def step_epoch(self, value, better) -> None:
        pass


def test_a_rising_val_loss_does_not_stop_a_classifier_whose_accuracy_still_rises():
    r = recipe(head="mlp")
    assert (r.evaluation.monitor, r.evaluation.mode) == ("val_acc", "max")
    head = torch.nn.Linear(2, 2)
    kit = SimpleNamespace(spec=SimpleNamespace(recipe=r), base=head, schedule=Schedule(),
                            best_weights=None)
    progress = Progress()
    # val_loss bottoms out at epoch 2 and rises from there (the head grows confident on
    # the rows it gets wrong); accuracy rises until epoch 12, then stays below it
    accs = [0.60, 0.66, 0.68, 0.70, 0.71, 0.72, 0.73, 0.74, 0.745, 0.75, 0.752, 0.755,
            *[0.75] * (r.evaluation.patience + 5)]  # flat for longer than patience
    for epoch, acc in enumerate(accs, start=1):
        with torch.no_grad():
            head.weight.fill_(epoch)  # this epoch's weights, to see which are kept
        loss = 0.9 if epoch == 1 else 0.8 + 0.05 * epoch
        track_best(kit, progress, {"epoch": epoch, "val_loss": loss, "val_acc": acc})
        progress.epoch = epoch
        if progress.stopped:
            break
    assert progress.best_epoch == 12 and progress.best == pytest.approx(0.755)
    assert progress.stopped and progress.epoch == 12 + r.evaluation.patience < len(accs)
    assert torch.equal(kit.best_weights["weight"], torch.full((2, 2), 12.0))


def test_monitor_auto_is_the_objectives_metric_and_a_given_one_is_kept():
    assert recipe().evaluation.monitor == "val_acc"
    assert recipe(objective="groups").evaluation.monitor == "val_loss"
    given = recipe(head="mlp", evaluation={"monitor": "val_loss"})
    assert (given.evaluation.monitor, given.evaluation.mode) == ("val_loss", "min")
    assert recipe(evaluation={"monitor": "val_f1"}).evaluation.monitor == "val_f1"
    with pytest.raises(ConfigError, match="val_f1xx"):
        load_config({"cache": "c", "evaluation": {"monitor": "val_f1xx"}})


def test_patience_auto_waits_longer_for_an_mlp_classifier_only():
    from raycache._heads.specs import HeadSpec
    from raycache._train.defaults import DEFAULT_PATIENCE, PATIENCE
    from raycache._train.driver.plan import sweep_members

    mlp = PATIENCE[("classification", "mlp")]
    assert mlp > DEFAULT_PATIENCE
    assert recipe(head="mlp").evaluation.patience == mlp
    assert recipe().evaluation.patience == DEFAULT_PATIENCE  # a linear head trained by epochs
    assert recipe(head="mlp", objective="groups").evaluation.patience == DEFAULT_PATIENCE
    assert recipe(head="mlp", evaluation={"patience": 3}).evaluation.patience == 3
    cfg = load(TrainConfig, {"cache": "c", "sweep": {"head": ["linear", "mlp"]}})
    head = HeadSpec(head="linear", in_dim=4, num_classes=2, hidden=(), dropout=0.0,
                    encoders=("e",), label="label", cache="c", fingerprint="f" * 24)
    members = sweep_members(cfg, head, 2000, 0, 15.0)
    assert [m.recipe.evaluation.patience for m in members] == [DEFAULT_PATIENCE, mlp]
    for bad in (0, "soon"):
        with pytest.raises(ConfigError, match="patience="):
            load_config({"cache": "c", "evaluation": {"patience": bad}})

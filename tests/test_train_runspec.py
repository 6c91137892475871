"""The run's spec (raycache._train.runspec): frozen, what a user reads of it, and its digest."""

import dataclasses
import json

import pytest

from raycache._train.driver.checks import load_config as load_train
from raycache._train.runspec import Recipe, WorkerSpec, digest
from tests.train_specs import HEAD, recipe, spec


def test_runspec_is_frozen_and_its_digest_follows_what_decides_the_result(tmp_path):
    s = spec(tmp_path)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.placement = "gpu"
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.recipe.optim.lr = 1.0
    assert s.digest() == spec(tmp_path).digest() == digest(HEAD, recipe())
    assert spec(tmp_path, lr=0.5).digest() != s.digest()
    assert s.replace(placement="stream").digest() == s.digest()  # placement: how,
    record = json.dumps(s.record())  # not what; and the record never holds the store
    assert str(tmp_path) not in record and "options" not in record


def test_what_a_user_reads_of_a_run_spec_holds_no_plumbing_and_digests_the_same(tmp_path):
    from raycache._train.runspec import Member, RunSpec

    lone = spec(tmp_path)
    swept = lone.replace(sweep=tuple(
        Member((("optim.lr", lr), ("hidden", (8,))), lone.head, lone.recipe)
        for lr in (0.1, 0.01)), select="val_acc", select_mode="max")
    for s in (lone, swept):
        view = s.view()
        assert isinstance(view, RunSpec) and view.digest() == s.digest()
        assert (view.run_name, view.run_dir, view.recipe) == (s.run_name, s.run_dir, s.recipe)
    assert swept.view().sweep == ({"optim.lr": 0.1, "hidden": [8]},
                                  {"optim.lr": 0.01, "hidden": [8]})
    plumbing = {"store", "shards", "checks", "keeps", "overlap_feed", "checkpoint_every",
                "checkpoint_seconds", "prefetch_batches", "progress", "key", "tracking"}
    fields = {f.name for f in dataclasses.fields(RunSpec)}
    assert not fields & plumbing
    own = {f.name for f in dataclasses.fields(WorkerSpec)}
    assert own == plumbing | {"run", "sweep"}  # the RunSpec held, not copied (sweep: members)
    assert lone.view() is lone.run and lone.head is lone.run.head


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

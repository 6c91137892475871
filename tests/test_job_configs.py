"""Every shipped YAML in jobs/ is a valid config, checked by the same code that runs it."""

from pathlib import Path

import pytest
import yaml

from raycache.fill.plan import load_config as load_fill
from raycache.pipeline import configs
from raycache.train.plan import load_config as load_train

JOBS = Path(__file__).resolve().parents[1] / "jobs"
YAMLS = sorted((JOBS / "configs").glob("*.yaml"))


def test_there_are_configs_for_every_job():
    names = {p.stem for p in YAMLS}
    for job in ("fill", "train", "pipeline"):
        assert (JOBS / f"{job}.py").is_file()
        assert {f"{job}-local", f"{job}-s3"} <= names


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: p.name)
def test_config_loads_and_checks(path):
    if path.stem.startswith("fill"):
        cfg = load_fill(path)
        assert cfg.encoders and cfg.source.labels
    elif path.stem.startswith("train"):
        cfg = load_train(path)
        assert cfg.resources.num_workers >= 2
    else:
        fill, train = configs(path)
        assert train.cache == fill.name and train.store.uri == fill.store.uri
    if path.stem.endswith("-s3"):
        text = path.read_text()
        assert "s3://" in text and "aws_secret" not in text.lower()


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: p.name)
def test_shipped_configs_use_the_grouped_spelling(path):
    """Old flat keys (`lr: 0.01`) still load, but what we ship shows the spelling of today."""
    from raycache.train.config import FLAT, GROUPS

    data = yaml.safe_load(path.read_text())
    train = data.get("train", {} if path.stem.startswith("fill") else data)
    flat = sorted(set(train) & (set(FLAT) - set(GROUPS)))
    assert not flat, f"{path.name}: flat keys {flat}; write them in their groups"


def test_flat_keys_still_load_to_the_grouped_config():
    grouped = load_train({"cache": "c", "optim": {"lr": 0.01}, "loop": {"epochs": 3},
                          "schedule": {"kind": "cosine"}})
    flat = load_train({"cache": "c", "lr": 0.01, "epochs": 3, "schedule": "cosine"})
    assert flat == grouped and flat.optim.lr == 0.01 and flat.schedule.kind == "cosine"


def test_a_broken_config_is_caught(tmp_path):
    bad = yaml.safe_load((JOBS / "configs" / "train-s3.yaml").read_text())
    bad["epoch"] = 3
    path = tmp_path / "train-bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(Exception, match="TrainConfig.epoch: unknown field"):
        load_train(path)


def test_runtime_env_ships_the_checkout_without_the_venv():
    env = yaml.safe_load((JOBS / "runtime_env.yaml").read_text())
    assert env["working_dir"] == "."
    # Ray's own matcher decides what the job gets: the package whole, the venv left behind
    from ray._private.runtime_env.packaging import _get_excludes

    root = JOBS.parent
    excluded = _get_excludes(root, env["excludes"])
    shipped = [p for p in (root / "raycache").rglob("*.py") if not excluded(p)]
    assert len(shipped) == len(list((root / "raycache").rglob("*.py")))
    assert excluded(root / ".venv") and excluded(root / "data")
    assert not any("SECRET" in k or "KEY" in k for k in env.get("env_vars", {}))

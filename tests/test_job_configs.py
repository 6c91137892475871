"""Every shipped YAML in jobs/ is a valid config, checked by the same code that runs it; the
local ones take their paths from the environment, and a job refuses a relative store."""

from pathlib import Path

import pytest
import yaml

from raycache import ConfigError, SourceError, StoreError
from raycache._cache.store import Store
from raycache._core.workdir import job_working_dir
from raycache._fill.plan import load_config as load_fill
from raycache._pipeline import TRAINING, configs
from raycache._probe.plan import load_config as load_probe
from raycache._source.config import SourceConfig
from raycache._source.files import list_files
from raycache._train.driver.checks import load_config as load_train

JOBS = Path(__file__).resolve().parents[1] / "jobs"
YAMLS = sorted((JOBS / "configs").glob("*.yaml"))


def test_there_are_configs_for_every_job():
    names = {p.stem for p in YAMLS}
    for job in ("fill", "train", "pipeline", "probe"):
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
    elif path.stem.startswith("probe"):
        cfg = load_probe(path, TRAINING)
        assert cfg.caches and cfg.methods
    else:
        fill, train = configs(path)
        assert train.cache == fill.name and train.store.uri == fill.store.uri
    if path.stem.endswith("-s3"):
        text = path.read_text()
        assert "s3://" in text and "aws_secret" not in text.lower()


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: p.name)
def test_shipped_configs_use_the_grouped_spelling(path):
    """Old flat keys (`lr: 0.01`) still load, but what we ship shows the spelling of today."""
    from raycache._train.config import FLAT, GROUPS

    data = yaml.safe_load(path.read_text())
    train = data.get("train", {} if path.stem.startswith(("fill", "probe")) else data)
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
    with pytest.raises(Exception, match="- epoch: unknown field"):
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


LOCAL = ("fill-local.yaml", "train-local.yaml", "pipeline-local.yaml")


@pytest.mark.parametrize("name", LOCAL)
def test_local_configs_take_their_paths_from_the_environment(name, monkeypatch, tmp_path):
    """Under `ray job submit` a relative path lands in Ray's temporary copy of the checkout:
    the local configs read absolute ones from the environment `ray start` ran in."""
    monkeypatch.setenv("RAYCACHE_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("RAYCACHE_STORE", str(tmp_path / "store"))
    path = JOBS / "configs" / name
    data, store = str(tmp_path / "data" / "stdlib-docs.parquet"), str(tmp_path / "store")
    if name.startswith("fill"):
        cfg = load_fill(path)
        assert (cfg.source.path, cfg.store.uri) == (data, store)
    elif name.startswith("train"):
        assert load_train(path).store.uri == store
    else:
        fill, train = configs(path)
        assert (fill.source.path, fill.store.uri, train.store.uri) == (data, store, store)


def test_local_configs_fall_back_to_the_checkout_paths(monkeypatch):
    for var in ("RAYCACHE_DATA", "RAYCACHE_STORE"):
        monkeypatch.delenv(var, raising=False)
    cfg = load_fill(JOBS / "configs" / "fill-local.yaml")
    assert (cfg.source.path, cfg.store.uri) == ("data/stdlib-docs.parquet", ".raycache/store")


def test_an_unset_variable_without_a_default_is_a_config_error(monkeypatch, tmp_path):
    monkeypatch.delenv("RC_NOT_SET", raising=False)
    monkeypatch.setenv("RC_EMPTY", "")
    path = tmp_path / "train.yaml"
    path.write_text("cache: ${RC_NOT_SET}\nstore:\n  uri: ${RC_EMPTY:-/srv/store}\n")
    with pytest.raises(ConfigError) as err:
        load_train(path)
    assert err.value.problems == [
        f"config file {str(path)!r}: ${{RC_NOT_SET}} is not set; export RC_NOT_SET (for a Ray "
        "job: in the environment `ray start` ran in, or in the runtime_env's env_vars), or "
        "write ${RC_NOT_SET:-default} in the file"]
    monkeypatch.setenv("RC_NOT_SET", "docs")
    cfg = load_train(path)
    assert (cfg.cache, cfg.store.uri) == ("docs", "/srv/store")  # empty: the default


@pytest.fixture
def in_a_job_copy(tmp_path, monkeypatch):
    """This process in a folder laid out as Ray unpacks a job's working_dir."""
    copy = tmp_path / "session_x" / "runtime_resources" / "working_dir_files" / "_ray_pkg_ab12"
    (copy / "jobs").mkdir(parents=True)
    monkeypatch.chdir(copy / "jobs")
    return copy


def test_a_relative_store_is_refused_in_a_job_copy(in_a_job_copy, tmp_path):
    with pytest.raises(StoreError) as err:
        Store(".raycache/store")
    message = str(err.value)
    assert message.startswith(
        "store '.raycache/store' is a relative path, and this Ray job runs in Ray's temporary "
        f"copy of its working_dir ({in_a_job_copy}): the path would land there")
    assert "export RAYCACHE_STORE=/path/to/store where `ray start` runs" in message
    assert Store(str(tmp_path / "store")).uri == str(tmp_path / "store")  # absolute: fine
    assert Store("s3://bucket/prefix").uri == "s3://bucket/prefix"


def test_a_relative_store_outside_a_job_copy_is_fine(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert job_working_dir() is None
    assert Store(".raycache/store").uri == str(tmp_path / ".raycache" / "store")


def test_a_missing_relative_source_in_a_job_copy_says_why(in_a_job_copy):
    with pytest.raises(SourceError, match=r"source path 'data/x.parquet' is a relative path, "
                                          r"and this Ray job runs in Ray's temporary copy"):
        list_files(SourceConfig(path="data/x.parquet"))
    (in_a_job_copy / "jobs" / "shipped.csv").write_text("id,text\n1,a\n")
    assert list_files(SourceConfig(path="shipped.csv"))[0] == "csv"  # shipped: found

"""Config loading: every problem is listed in one error that names the value and the fix."""

import pytest

from raycache import ConfigError
from raycache._fill.plan import load_config as load_fill
from raycache._train.driver.checks import load_config as load_train


def fill_dict(**over):
    cfg = {
        "name": "docs",
        "source": {"path": "data.parquet", "labels": ["label"]},
        "encoders": [{"name": "e", "kind": "hf-text", "input": "text", "path": "m"}],
    }
    cfg.update(over)
    return cfg


def test_valid_config_builds_nested_dataclasses():
    cfg = load_fill(fill_dict())
    assert cfg.source.key == "id" and cfg.encoders[0].max_length == "auto"
    assert cfg.store.uri.endswith("store")


def test_all_structural_problems_reported_together():
    bad = fill_dict(batch_sise=3, rows_per_shard="two")
    del bad["name"]
    with pytest.raises(ConfigError) as err:
        load_fill(bad)
    text = str(err.value)
    assert "batch_sise: unknown field" in text
    assert "rows_per_shard='two': expected int" in text
    assert "name: missing (required)" in text
    assert len(err.value.problems) == 3


def test_semantic_problems_name_value_and_fix():
    bad = fill_dict(
        encoders=[
            {"name": "e", "kind": "bert-ish", "input": "text"},
            {"name": "e", "kind": "torch", "input": "x", "dtype": "int8"},
        ],
        batch_size=0,
    )
    with pytest.raises(ConfigError) as err:
        load_fill(bad)
    text = str(err.value)
    assert "kind='bert-ish': unknown; expected one of ['hf-image', 'hf-text', 'torch']" in text
    assert "dtype='int8'" in text
    assert "name 'e' is used twice" in text
    assert "batch_size=0: expected a whole number >= 1, or 'auto'" in text


def test_train_config_checks():
    with pytest.raises(ConfigError) as err:
        load_train({"cache": "c", "head": "transformer", "val_fraction": 1.5,
                           "placement": "gpu"})
    text = str(err.value)
    assert "head='transformer'" in text and "val_fraction=1.5" in text
    assert "placement='gpu' needs use_gpu: true" in text


def test_missing_yaml_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_fill(tmp_path / "nope.yaml")


def test_store_defaults_to_raycache_store_env(monkeypatch):
    from raycache._cache.config import StoreConfig

    monkeypatch.setenv("RAYCACHE_STORE", "s3://team-bucket/caches")
    assert load_fill(fill_dict()).store.uri == "s3://team-bucket/caches"
    monkeypatch.delenv("RAYCACHE_STORE")
    assert StoreConfig().uri == ".raycache/store"


def test_every_problem_is_named_by_its_path_from_the_root():
    """One spelling: the loader names each nested config's problems by the path it walked."""
    bad = fill_dict(rows_per_shard=0, pool={"batch_size": 0},
                    views={"count": 0, "augment": [{"kind": "crop"}]})
    bad["source"]["format"] = "xml"
    bad["encoders"].append({**bad["encoders"][0], "name": "second", "dtype": "int8"})
    with pytest.raises(ConfigError) as err:
        load_fill(bad)
    starts = {p.split("=")[0].split(":")[0] for p in err.value.problems}
    assert {"rows_per_shard", "pool.batch_size", "views.count", "source.format",
            "encoders[1].dtype"} <= starts, err.value.problems


def test_a_pipeline_section_names_its_problems_from_the_pipeline_root(tmp_path):
    from raycache._pipeline import configs

    with pytest.raises(ConfigError) as err:
        configs({"fill": fill_dict(rows_per_shard=0), "train": {"loop": {"epochs": 0}}})
    assert any(p.startswith("fill.rows_per_shard=0") for p in err.value.problems)

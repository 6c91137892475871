"""The driver without a cluster (raycache._train.driver): the plan's reads and checks, and
train's keywords."""

from types import SimpleNamespace

import pytest

from raycache import ConfigError
from raycache._train.driver.checks import load_config as load_train


def test_the_plan_reads_each_column_of_the_cache_once():
    """A cache without label_stats whose labels have nulls: the stats, then the null rows'
    keys, read the label column once and the key column once."""
    import pyarrow as pa

    from raycache._train.driver.checks import class_counts
    from raycache._train.driver.columns import Columns

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
    overlap = Columns(cache, lambda name: table.column(name))
    assert overlap.rows == 3 and overlap("id") is overlap("id") and len(asked) == 2


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


def test_train_takes_the_old_overlap_keywords_with_a_deprecation_pointing_at_pipeline():
    import raycache

    for old in ("filling", "landing"):
        with pytest.warns(DeprecationWarning, match=rf"train\({old}=.*raycache.pipeline"), \
                pytest.raises(ConfigError):
            raycache.train({"cache": "c", "head": "nope"}, **{old: object()})  # then refused
    with pytest.raises(TypeError, match="neither filling= nor landing="):
        raycache.train({"cache": "c"}, landing=object(), filling=object())

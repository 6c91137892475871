"""Bad input fails before work starts, names the value and the fix, and leaves no manifest."""

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raycache
from raycache import ConfigError, EncoderError, SourceError
from tests.conftest import separable, toy_fill


def no_cache_written(store: Path) -> bool:
    return not store.exists() or not list(store.rglob("*"))


@pytest.fixture
def source(tmp_path) -> Path:
    path = tmp_path / "data.parquet"
    pq.write_table(separable(n=20), path)
    return path


def test_source_path_that_does_not_exist(tmp_path):
    with pytest.raises(SourceError, match=r"source path '.*nope\.parquet' does not exist"):
        raycache.fill(toy_fill(str(tmp_path / "nope.parquet"), str(tmp_path / "store")))
    assert no_cache_written(tmp_path / "store")


@pytest.mark.parametrize(("field", "value", "message"), [
    ("key", "uid", r"source.key column 'uid' is not in .*; its columns are \['id', "),
    ("labels", ["topic"], r"source.label column 'topic' is not in"),
])
def test_missing_key_or_label_column(source, tmp_path, field, value, message):
    cfg = toy_fill(str(source), str(tmp_path / "store"))
    cfg["source"][field] = value
    with pytest.raises(ConfigError, match=message):
        raycache.fill(cfg)
    assert no_cache_written(tmp_path / "store")


def test_unknown_encoder_kind(source, tmp_path):
    cfg = toy_fill(str(source), str(tmp_path / "store"))
    cfg["encoders"][0]["kind"] = "clip"
    with pytest.raises(ConfigError,
                       match=r"kind='clip': unknown; expected one of \['hf-image', 'hf-text'"):
        raycache.fill(cfg)
    assert no_cache_written(tmp_path / "store")


def test_factory_that_does_not_import(source, tmp_path):
    cfg = toy_fill(str(source), str(tmp_path / "store"))
    cfg["encoders"][0]["factory"] = "my_models.encoders:build"
    with pytest.raises(EncoderError, match="factory='my_models.encoders:build' does not import"):
        raycache.fill(cfg)
    assert no_cache_written(tmp_path / "store")


def test_trainable_encoder_of_a_family_that_cannot_train_is_refused(source, tmp_path,
                                                                      monkeypatch):
    from raycache._encoders import ENCODERS

    monkeypatch.setitem(ENCODERS, "torch", ENCODERS["torch"]._replace(live=None))
    cfg = toy_fill(str(source), str(tmp_path / "store"))
    cfg["encoders"][0]["trainable"] = True
    with pytest.raises(ConfigError, match="kind 'torch' cannot be trained.*trainable: false"):
        raycache.fill(cfg)
    assert no_cache_written(tmp_path / "store")


def test_unknown_format_suffix(tmp_path):
    (tmp_path / "data.txt").write_text("x")
    with pytest.raises(SourceError, match="set source.format"):
        raycache.fill(toy_fill(str(tmp_path / "data.txt"), str(tmp_path / "store")))


def test_train_on_missing_cache(tmp_path):
    with pytest.raises(raycache.CacheNotFound, match="no committed cache named 'nothing'"):
        raycache.train({"cache": "nothing", "store": {"uri": str(tmp_path)}})


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_a_label_of_neither_ids_nor_names_for_groups(ray_session, tmp_path):
    table = separable(n=20)
    pq.write_table(table.append_column("score", pa.array([0.5] * 20)), tmp_path / "d.parquet")
    store = str(tmp_path / "store")
    raycache.fill(toy_fill(str(tmp_path / "d.parquet"), store) | {
        "source": {"path": str(tmp_path / "d.parquet"), "key": "id", "labels": ["score"]}})
    runs = Path(store, "toy")
    before = sorted(runs.rglob("*"))
    with pytest.raises(ConfigError) as err:
        raycache.train({"cache": "toy", "store": {"uri": store}, "label": "score",
                        "objective": "groups", "embedding_dim": 4,
                        "groups": {"loss": "infonce"}})
    text = str(err.value)
    assert "label column 'score' holds double values" in text
    assert "integer group ids 0..K-1 or group names" in text
    assert sorted(runs.rglob("*")) == before  # no run folder, no checkpoint


def test_csv_and_jsonl_sources_check_columns_too(tmp_path):
    csv = tmp_path / "d.csv"
    csv.write_text("id,text\n1,hello\n")
    cfg = toy_fill(str(csv), str(tmp_path / "store"))
    with pytest.raises(ConfigError, match=r"'features' is not in .*\['id', 'text'\]"):
        raycache.fill(cfg)
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text('{"id": 1, "text": "x", "label": 0}\n')
    with pytest.raises(ConfigError, match=r"'features' is not in"):
        raycache.fill(toy_fill(str(jsonl), str(tmp_path / "store")))

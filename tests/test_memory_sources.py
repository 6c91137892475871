"""Sources as users hold them in memory: a pandas DataFrame, a pyarrow Table, a Hugging Face
datasets Dataset / DatasetDict split and a ray.data Dataset fill like files, are fingerprinted by
their content (or the version the user names) and read back row for row."""

import numpy as np
import pyarrow as pa
import pytest

import raycache
from raycache import ConfigError, SourceError
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(180)


def fill_from(data, store, **source):
    cfg = toy_fill("unused", str(store), in_process=True)
    cfg["source"] = {"data": data, "key": "id", "labels": ["label", "name"], **source}
    return raycache.fill(cfg)


def embedded(cache) -> dict[str, list[float]]:
    t = cache.read_table(columns=["id", "proj"])
    return dict(zip(t.column("id").to_pylist(), t.column("proj").to_pylist(), strict=True))


def test_a_dataframe_an_arrow_table_and_files_give_the_same_cache_rows(tmp_path):
    import pyarrow.parquet as pq

    table = separable(n=300)
    (tmp_path / "src").mkdir()
    pq.write_table(table, tmp_path / "src" / "a.parquet")
    from_files = raycache.fill(toy_fill(str(tmp_path / "src"), str(tmp_path / "files"),
                                        in_process=True))
    df = table.to_pandas()
    from_df = fill_from(df, tmp_path / "store")
    assert not from_df.hit and from_df.cache.manifest.rows == 300
    assert embedded(from_df.cache) == embedded(from_files.cache)

    again = fill_from(df.copy(), tmp_path / "store")  # the same content: the same cache
    assert again.hit and again.cache.fingerprint == from_df.cache.fingerprint
    as_arrow = fill_from(table, tmp_path / "store")
    assert embedded(as_arrow.cache) == embedded(from_files.cache)
    chunked = pa.concat_tables([table.slice(0, 100), table.slice(100)])  # other chunking
    assert fill_from(chunked, tmp_path / "store").cache.fingerprint == as_arrow.cache.fingerprint

    changed = df.copy()
    changed.loc[0, "label"] = (changed.loc[0, "label"] + 1) % 3
    other = fill_from(changed, tmp_path / "store")
    assert not other.hit and other.cache.fingerprint != from_df.cache.fingerprint
    # the new version shares the 299 unchanged rows; the relabelled row reuses its embedding
    assert (other.encoded_rows, other.reused_rows, other.shared_rows) == (0, 1, 299)
    labels = other.cache.read_table(columns=["id", "label"]).to_pydict()
    assert dict(zip(*labels.values(), strict=True))["row-00000"] == changed.loc[0, "label"]


def test_a_hugging_face_dataset_and_a_datasetdict_split_fill(tmp_path):
    import datasets

    table = separable(n=240)
    ds = datasets.Dataset(table)
    whole = fill_from(ds, tmp_path / "store")
    assert whole.cache.manifest.rows == 240
    split = datasets.DatasetDict({"train": datasets.Dataset(table.slice(0, 200)),
                                  "test": datasets.Dataset(table.slice(200))})
    test = fill_from(split, tmp_path / "store", split="test")
    assert test.cache.manifest.rows == 40 and test.encoded_rows == 0  # a version of "toy":
    assert test.shared_rows == 40  # the whole dataset's last shard holds these rows
    assert sorted(embedded(test.cache)) == table.column("id").to_pylist()[200:]
    shuffled = fill_from(ds.shuffle(seed=0).select(range(50)), tmp_path / "store")
    assert shuffled.cache.manifest.rows == 50 and shuffled.encoded_rows == 0

    with pytest.raises(SourceError, match=r"splits \['test', 'train'\]; set source.split"):
        fill_from(split, tmp_path / "store")


def test_a_class_label_column_fills_as_named_classes(tmp_path):
    import datasets

    table = separable(n=240).drop_columns(["name"])
    features = datasets.Features({
        "id": datasets.Value("string"), "features": datasets.List(datasets.Value("float32"), 8),
        "label": datasets.ClassLabel(names=["zebra", "ant", "moth"])})
    ds = datasets.Dataset.from_dict(table.to_pydict(), features=features)
    cache = fill_from(ds, tmp_path / "store", labels=["label"]).cache
    stats = cache.manifest.label_stats["label"]
    assert stats["classes"] == ["ant", "moth", "zebra"]
    ids = table.column("label").to_pylist()
    assert stats["counts"] == [ids.count(1), ids.count(2), ids.count(0)]


def test_bad_in_memory_sources_are_named_with_the_fix(tmp_path):
    with pytest.raises(SourceError, match="source.data is a builtins.list; expected a pandas"):
        fill_from([1, 2, 3], tmp_path / "store")
    with pytest.raises(SourceError, match="has no rows"):
        fill_from(separable(n=10).slice(0, 0), tmp_path / "store")
    cfg = toy_fill(str(tmp_path), str(tmp_path / "store"))
    cfg["source"]["data"] = separable(n=10)
    with pytest.raises(ConfigError, match="give exactly one of path"):
        raycache.fill(cfg)


@pytest.mark.timeout(300)
def test_a_ray_dataset_needs_a_named_version_and_fills_under_it(tmp_path, ray_session):
    import ray

    table = separable(n=200)
    ds = ray.data.from_arrow(table)
    with pytest.raises(SourceError, match="name this version of the data with source.version"):
        fill_from(ds, tmp_path / "store")
    result = fill_from(ds, tmp_path / "store", version="2026-11-24")
    assert result.cache.manifest.rows == 200
    got = embedded(result.cache)
    assert sorted(got) == sorted(table.column("id").to_pylist())
    first = np.asarray(got["row-00000"])
    assert first.shape == (16,) and np.isfinite(first).all()
    assert fill_from(ds, tmp_path / "store", version="2026-11-24").hit


def test_a_save_to_disk_folder_and_a_hub_dataset_id_from_the_local_cache(tmp_path, monkeypatch):
    import datasets
    import pyarrow.parquet as pq

    table = separable(n=200)
    datasets.Dataset(table).save_to_disk(str(tmp_path / "saved"))
    saved = fill_from(str(tmp_path / "saved"), tmp_path / "store")
    assert saved.cache.manifest.rows == 200

    # the layout `hf download --repo-type dataset acme/toy` leaves in the hub cache
    repo = tmp_path / "hub" / "datasets--acme--toy"
    revision = "fedcba9876543210fedcba9876543210fedcba98"
    data = repo / "snapshots" / revision / "data"
    data.mkdir(parents=True)
    pq.write_table(table.slice(0, 150), data / "train-00000-of-00001.parquet")
    pq.write_table(table.slice(150), data / "test-00000-of-00001.parquet")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    test = fill_from("acme/toy", tmp_path / "store", split="test")
    assert test.cache.manifest.rows == 50 and test.encoded_rows == 0  # reused from `saved`
    assert sorted(embedded(test.cache)) == table.column("id").to_pylist()[150:]
    with pytest.raises(SourceError, match=r"has splits \['test', 'train'\]; set source.split"):
        fill_from("acme/toy", tmp_path / "store")
    with pytest.raises(SourceError, match="has no split 'validation'"):
        fill_from("acme/toy", tmp_path / "store", split="validation")
    with pytest.raises(SourceError, match="not in the Hugging Face cache.*HF_HUB_OFFLINE"):
        fill_from("acme/missing", tmp_path / "store", split="train")

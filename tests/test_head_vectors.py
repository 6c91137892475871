"""Every vector exportable: a trained head's vectors (a similarity head's embeddings, a
classifier's penultimate layer) exported beside the cache's rows equal the head's own forward
pass; the export's vectors as a tensor column that Ray Data reads as one 2-D array; and
`shard_urls()` on a version that reads files in part says so (or refuses)."""

import json
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raycache
from raycache import ConfigError
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def similar(minilm_heads):
    """A similarity head on the MiniLM cache, trained in this process."""
    return raycache.train({"cache": "docs", "store": {"uri": minilm_heads["store"]},
                           "num_workers": 0, "progress": False, "label": "topic", "epochs": 2,
                           "objective": "groups", "embedding_dim": 8, "normalize": True,
                           "groups": {"loss": "infonce"}}).checkpoint


def by_key(path, column: str) -> dict[str, np.ndarray]:
    table = pq.read_table(path)
    vectors = np.stack(table.column(column).to_numpy(zero_copy_only=False))
    return dict(zip(table.column("id").to_pylist(), vectors, strict=True))


def test_a_similarity_heads_embeddings_export_equal_to_its_forward(minilm_heads, similar,
                                                                   tmp_path):
    cache = raycache.open_cache("docs", minilm_heads["store"])
    done = raycache.export(cache, str(tmp_path / "sim.parquet"), head=similar,
                           head_column="similar")
    assert done.columns == ("id", "topic", "similar") and done.dims == {"similar": 8}
    assert done.rows == cache.manifest.rows
    got = by_key(tmp_path / "sim.parquet", "similar")
    head = raycache.load_head(similar)
    rows = minilm_heads["rows"]
    want = head.embed([r["text"] for r in rows])  # the encoder and the head, run live
    np.testing.assert_allclose([got[r["id"]] for r in rows], want, atol=1e-5)
    assert np.allclose(np.linalg.norm(want, axis=1), 1)  # trained with normalize


def test_a_classifiers_penultimate_layer_exports_beside_its_encoder(minilm_heads, tmp_path):
    cache = raycache.open_cache("docs", minilm_heads["store"])
    head = raycache.load_head(minilm_heads["mlp"])
    done = raycache.export(cache, str(tmp_path / "mlp.parquet"), head=head,
                           layer="penultimate", encoders=["minilm"])
    assert done.dims == {"minilm": 384, "head": 16}
    table = pq.read_table(tmp_path / "mlp.parquet")
    x = np.stack(table.column("minilm").to_numpy(zero_copy_only=False))
    hidden = np.stack(table.column("head").to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(hidden, head.embed_embeddings(x, "penultimate"), atol=1e-5)


def test_a_head_that_does_not_fit_the_cache_is_refused_naming_why(minilm_heads, similar,
                                                                  tmp_path):
    cache = raycache.open_cache("docs", minilm_heads["store"])
    with pytest.raises(ConfigError) as info:
        raycache.export(cache, str(tmp_path / "x.parquet"), head=similar, head_column="topic")
    assert "head_column='topic' is a column of cache docs/" in str(info.value)
    with pytest.raises(ConfigError, match="layer='middle' is not a layer; expected output"):
        raycache.export(cache, str(tmp_path / "x.parquet"), head=similar, layer="middle")
    with pytest.raises(ConfigError, match="tensor columns are written to Parquet only"):
        raycache.export(cache, str(tmp_path / "x.lance"), "lance", tensor=True)
    assert not (tmp_path / "x.parquet").exists()


@pytest.mark.timeout(600)
def test_ray_data_reads_the_tensor_export_as_one_2d_array(minilm_heads, similar, tmp_path,
                                                         ray_session):
    import ray

    cache = raycache.open_cache("docs", minilm_heads["store"])
    raycache.export(cache, str(tmp_path / "t.parquet"), head=similar, encoders=["minilm"],
                    tensor=True)
    batch = ray.data.read_parquet(str(tmp_path / "t.parquet"),
                                  override_num_blocks=1).take_batch(1000)
    assert batch["minilm"].dtype == np.float32 and batch["minilm"].ndim == 2
    assert batch["head"].shape == (cache.manifest.rows, 8)
    plain = cache.read_table(["id", "minilm"])
    order = {k: i for i, k in enumerate(plain.column("id").to_pylist())}
    want = np.stack(plain.column("minilm").to_numpy(zero_copy_only=False))
    np.testing.assert_array_equal(batch["minilm"], want[[order[k] for k in batch["id"]]])


def test_shard_urls_of_a_version_that_reads_files_in_part_warns_or_raises(tmp_path):
    src = tmp_path / "source"
    src.mkdir()
    table = separable(n=100)
    pq.write_table(table, src / "a.parquet")
    cfg = toy_fill(str(src), str(tmp_path / "store"), rows_per_shard=50, in_process=True,
                   compact_below=0)
    v1 = raycache.fill(cfg).cache
    data = table.to_pydict()
    pq.write_table(pa.table({k: v[1:] for k, v in data.items()}, schema=table.schema),
                   src / "a.parquet")  # one row removed: v2 keeps 99 of v1's rows
    v2 = raycache.fill(cfg).cache
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(v1.shard_urls()) == 2  # every file read whole: no warning
    with pytest.warns(raycache.KeptRowsWarning, match="kept_rows\\(\\)") as got:
        urls = v2.shard_urls()
    whole = sum(pq.read_metadata(u).num_rows for u in urls)
    assert whole < v2.manifest.rows == 99
    assert f"hold {whole} of its 99 rows" in str(got[0].message)
    with pytest.raises(raycache.RaycacheError, match="raycache.export"):
        v2.shard_urls(in_part="raise")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert v2.shard_urls(in_part="ignore") == urls


def test_the_cli_exports_a_heads_vectors_as_tensors(minilm_heads, tmp_path, capsys):
    from raycache._cli import main

    out = tmp_path / "cli.parquet"
    assert main(["export", "docs", "--store", minilm_heads["store"], "--to", str(out),
                 "--head", minilm_heads["mlp"], "--layer", "penultimate", "--tensor",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["dims"] == {"head": 16}
    table = pq.read_table(out)
    assert table.column_names == ["id", "topic", "head"]
    assert isinstance(table.schema.field("head").type, pa.FixedShapeTensorType)
    head = raycache.load_head(minilm_heads["mlp"])
    rows = minilm_heads["rows"]
    got = dict(zip(table.column("id").to_pylist(), table.column("head").combine_chunks()
                   .to_numpy_ndarray(), strict=True))
    np.testing.assert_allclose([got[r["id"]] for r in rows],
                               head.embed_embeddings(head.features([r["text"] for r in rows]),
                                                     "penultimate"), atol=1e-5)

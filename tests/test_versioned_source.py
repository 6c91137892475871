"""S3 sources on a bucket with versioning: the fill lists each object's VersionId, reads
exactly that version and fingerprints it, so an object replaced during a fill changes nothing;
an unversioned bucket keeps the check that fails such a fill."""

import numpy as np
import pyarrow.parquet as pq
import pytest
import s3fs
import torch
from toy_encoders import projection

import raycache
from raycache import SourceError
from raycache._fill.plan import load_config as load_fill
from raycache._fill.plan import plan
from raycache._fill.run import complete
from tests.conftest import separable, toy_fill

pytestmark = [pytest.mark.s3, pytest.mark.timeout(300)]


def write(fs: s3fs.S3FileSystem, uri: str, seed: int) -> None:
    with fs.open(uri, "wb") as f:
        pq.write_table(separable(n=300, seed=seed), f, row_group_size=100)


def embeddings(seed: int) -> dict[str, np.ndarray]:
    table = separable(n=300, seed=seed)
    x = torch.from_numpy(np.stack(table.column("features").to_numpy(zero_copy_only=False)))
    return dict(zip(table.column("id").to_pylist(), projection(8, 16)(x).detach().numpy(),
                    strict=True))


def check_holds(result, seed: int) -> None:
    table = result.cache.read_table()
    want = embeddings(seed)
    got = np.stack(table.column("proj").to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(got, np.stack([want[k] for k in table.column("id").to_pylist()]),
                               atol=1e-6)
    labels = separable(n=300, seed=seed).column("label").to_pylist()
    assert table.column("label").to_pylist() == labels


def test_a_versioned_object_replaced_mid_fill_changes_nothing(s3_endpoint, tmp_path):
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    fs.mkdir("rc-versioned")
    fs.make_bucket_versioned("rc-versioned")
    uri = "s3://rc-versioned/data/a.parquet"
    write(fs, uri, seed=0)
    cfg = toy_fill(uri, str(tmp_path / "store"), in_process=True, rows_per_shard=100)
    p = plan(load_fill(cfg))
    [listed] = p.files
    assert listed.version_id and p.inputs["source"]["files"][0]["version_id"] == \
        listed.version_id  # in the fingerprint
    write(fs, uri, seed=1)  # replaced after the listing, before any row is read
    check_holds(complete(p, []), seed=0)  # exactly the listed version, committed
    again = raycache.fill(cfg)  # a new listing: the new version, a new fingerprint
    assert not again.hit and again.cache.fingerprint != p.fingerprint
    check_holds(again, seed=1)


def test_an_unversioned_object_replaced_mid_fill_fails_it(s3_endpoint, tmp_path):
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    fs.mkdir("rc-unversioned")
    uri = "s3://rc-unversioned/data/a.parquet"
    write(fs, uri, seed=0)
    cfg = toy_fill(uri, str(tmp_path / "store"), in_process=True, rows_per_shard=100)
    p = plan(load_fill(cfg))
    assert not p.files[0].version_id and "version_id" not in p.inputs["source"]["files"][0]
    write(fs, uri, seed=1)
    with pytest.raises(SourceError, match="changed"):
        complete(p, [])
    assert not list((tmp_path / "store").rglob("manifest.json"))

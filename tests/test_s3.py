"""The same fill and train against S3: a moto server on 127.0.0.1 that Ray workers reach too."""

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
import s3fs

import raycache
from raycache import StoreError
from raycache._core.secrets import REDACTED
from tests.conftest import separable, toy_fill

KEY, SECRET = "AKIARAYCACHETESTKEY01", "raycache-secret-value-xyz"

pytestmark = [pytest.mark.ray, pytest.mark.s3, pytest.mark.timeout(300)]


def test_fill_and_train_on_s3(ray_session, bucket, tmp_path, capfd, monkeypatch):
    """On Ray (Ray Data fill, DDP training), with credentials in the store and source options:
    they reach every worker, and neither the bucket nor Ray's session folder (logs, export
    events of Ray Data's operators and Ray Train's run) holds them afterwards."""
    from ray._private.worker import global_worker

    monkeypatch.setenv("RAY_TRAIN_ENABLE_STATE_TRACKING", "1")  # Ray Train records the run
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    with fs.open(f"{bucket}/data/part-0.parquet", "wb") as f:
        pq.write_table(separable(n=400), f)
    store = f"{bucket}/caches"
    cfg = toy_fill(f"{bucket}/data/", store, in_process=False)  # a Ray Data fill
    cfg["store"]["options"] = {"key": KEY, "secret": SECRET}
    cfg["source"]["options"] = {"client_kwargs": {"aws_secret_access_key": SECRET,
                                                  "aws_access_key_id": KEY}}
    result = raycache.fill(cfg)
    assert not result.hit and result.cache.manifest.rows == 400
    assert result.cache.uri.startswith(f"{bucket}/caches/toy/")
    source_file = result.cache.manifest.inputs["source"]["files"][0]
    assert source_file["uri"] == f"{bucket}/data/part-0.parquet"
    assert source_file["version"].strip('"')  # the ETag
    manifest = json.loads(fs.cat(f"{result.cache.uri}/manifest.json"))  # names the shard list
    listed = json.loads(fs.cat(f"{result.cache.uri}/{manifest['shard_list']['path']}"))
    assert [s["path"] for s in listed] == [s.path for s in result.cache.manifest.shards]
    with fs.open(result.cache.shard_urls()[0], "rb") as f:
        assert len(pd.read_parquet(f)) == 200

    assert raycache.fill(cfg).hit
    fs.rm(f"{bucket}/data", recursive=True)  # training reads only the cache
    run = raycache.train({"cache": "toy", "store": cfg["store"], "epochs": 5, "lr": 0.05,
                          "batch_size": 32, "num_workers": 2, "progress": False})
    assert run.metrics["val_acc"] > 0.9
    assert run.checkpoint.startswith(f"{bucket}/caches/toy/{result.cache.fingerprint}/runs/")
    names = {p.rsplit("/", 1)[-1] for p in fs.ls(run.checkpoint)}
    assert names >= {"head.safetensors", "head.json"}
    assert [c.name for c in raycache.ls(store)] == ["toy"]
    written = {p: fs.cat_file(p) for p in fs.find(bucket)}
    session = Path(global_worker.node.get_session_dir_path())
    written.update({str(p): p.read_bytes() for p in session.rglob("*") if p.is_file()
                    and p.stat().st_size < 2**26 and "sockets" not in p.parts})
    assert {p for p, data in written.items() if KEY.encode() in data or SECRET.encode() in data
            } == set()
    exports = {p.name: p.read_bytes() for p in session.rglob("event_EXPORT_*.log")}
    assert REDACTED.encode() in exports["event_EXPORT_DATASET_METADATA.log"]  # the options
    assert run.spec.run_name.encode() in exports["event_EXPORT_TRAIN_STATE.log"]  # the spec
    out = capfd.readouterr()
    assert KEY not in out.out + out.err and SECRET not in out.out + out.err


def test_unreachable_s3_endpoint_fails_before_any_work(tmp_path):
    pq.write_table(separable(n=10), tmp_path / "a.parquet")
    cfg = toy_fill(str(tmp_path / "a.parquet"), "s3://rc-nowhere/caches")
    cfg["store"]["options"] = {"client_kwargs": {"endpoint_url": "http://127.0.0.1:9"}}
    with pytest.raises(StoreError) as err:
        raycache.fill(cfg)
    text = str(err.value)
    assert "s3://rc-nowhere/caches" in text and "unreachable" in text
    assert "http://127.0.0.1:9" in text and "AWS_ENDPOINT_URL" in text

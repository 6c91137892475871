"""Credentials in store and source options are used, and never written, logged or printed."""

import os
import pickle
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import raycache
from raycache._cache.config import StoreConfig
from raycache._cache.store import Store
from raycache._core.config import load
from raycache._core.secrets import REDACTED, Secret, is_secret, merge, redact, reveal, seal, split
from raycache._fill.plan import load_config as load_fill
from tests.conftest import separable, toy_fill

KEY, SECRET, TOKEN = "AKIARAYCACHETESTKEY01", "raycache-secret-value-xyz", "raycache-token-abc"
SOURCE_KEY, SOURCE_SECRET = "AKIARAYCACHESOURCE02", "raycache-source-secret-qrs"
VALUES = (KEY, SECRET, TOKEN, SOURCE_KEY, SOURCE_SECRET)


def store_options(endpoint: str) -> dict:
    """s3fs options holding credentials at the top level and nested in client_kwargs."""
    return {"key": KEY, "secret": SECRET,
            "client_kwargs": {"endpoint_url": endpoint, "aws_session_token": TOKEN},
            "config_kwargs": {"connect_timeout": 5}}


def leaks(data: bytes) -> list[str]:
    return [v for v in VALUES if v.encode() in data]


def test_secret_names():
    secret = ["key", "secret", "token", "password", "aws_secret_access_key", "aws_session_token",
              "AccessKeyId", "SecretAccessKey", "client_secret", "account_key", "sas_token",
              "api_key", "credentials", "Authorization", "passphrase", "private_key_id",
              "connection_string", "ConnectionString", "conn_str", "pkey", "session_token",
              "client_secret", "credential", "x-api-key", "bearer_token"]
    plain = ["endpoint_url", "region_name", "anon", "client_kwargs", "config_kwargs",
             "connect_timeout", "use_listings_cache", "version_aware", "requester_pays",
             "default_block_size", "profile", "monkey", "tokenizer", "keyword", "username",
             "host", "port", "known_hosts", "connections", "string", "account_name"]
    assert [n for n in secret if not is_secret(n)] == []
    assert [n for n in plain if is_secret(n)] == []


def test_redact_seal_split_merge_round_trip():
    options = {"key": KEY, "anon": False, "client_kwargs": {"endpoint_url": "http://x",
                                                             "aws_secret_access_key": SECRET},
               "headers": [{"Authorization": TOKEN}], "token": {"type": "service_account"}}
    red = redact(options)
    assert red["key"] == REDACTED and red["client_kwargs"]["endpoint_url"] == "http://x"
    assert red["headers"][0]["Authorization"] == REDACTED and red["token"] == REDACTED
    assert leaks(repr(red).encode()) == []
    sealed = seal(options)
    assert seal(sealed) == sealed and reveal(sealed) == options
    assert isinstance(sealed["client_kwargs"]["aws_secret_access_key"], Secret)
    assert leaks(repr(sealed).encode()) == [] and leaks(str(sealed).encode()) == []
    public, secret = split(sealed)
    assert public == {"anon": False, "client_kwargs": {"endpoint_url": "http://x"}}
    assert sorted(secret) == ["client_kwargs", "headers", "key", "token"]
    assert reveal(merge(public, secret)) == options
    assert reveal(pickle.loads(pickle.dumps(sealed))) == options  # workers get the values
    pairs = {"headers": [("Authorization", f"Bearer {TOKEN}"), ("Accept", "*/*")],
             "pkey": object(), "connection_string": f"AccountKey={SECRET}"}
    assert reveal(seal(pairs)) == pairs and leaks(repr(seal(pairs)).encode()) == []
    assert redact(pairs) == {"headers": [["Authorization", REDACTED], ["Accept", "*/*"]],
                             "pkey": REDACTED, "connection_string": REDACTED}


def test_configs_and_store_never_show_their_credentials():
    cfg = load_fill({**toy_fill("s3://b/data", "s3://b/caches"),
                            "store": {"uri": "s3://b/caches", "options": store_options("h")}})
    store = Store.from_config(cfg.store)
    for text in (repr(cfg), str(cfg), repr(cfg.store), repr(store), repr(store.public())):
        assert leaks(text.encode()) == [], text
    assert reveal(store.options)["client_kwargs"]["aws_session_token"] == TOKEN
    assert store.public().options == {"client_kwargs": {"endpoint_url": "h"},
                                      "config_kwargs": {"connect_timeout": 5}}
    assert load(StoreConfig, {"options": {"password": "p"}}).options == {"password": Secret("p")}


@pytest.mark.s3
@pytest.mark.timeout(120)
def test_fill_and_train_with_credentials_write_none_of_them(s3_endpoint, bucket, tmp_path,
                                                            capfd, caplog, monkeypatch):
    """Fill and train (no Ray: in-process fill, local-mode training) with credentials in the
    store and source options; then every object in the bucket, every file the run left under
    the temp folder, the output, the logs and the results' reprs are free of them."""
    import s3fs

    work = tmp_path / "tmp"
    work.mkdir()
    monkeypatch.setenv("TMPDIR", str(work))
    monkeypatch.setattr(tempfile, "tempdir", str(work))
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    with fs.open(f"{bucket}/data/part-0.parquet", "wb") as f:
        pq.write_table(separable(n=240), f)
    source_options = {"client_kwargs": {"aws_access_key_id": SOURCE_KEY,
                                        "aws_secret_access_key": SOURCE_SECRET}}
    cfg = toy_fill(f"{bucket}/data/", f"{bucket}/caches", rows_per_shard=80, progress=True)
    cfg["store"]["options"] = store_options(s3_endpoint)
    cfg["source"]["options"] = source_options
    filled = raycache.fill(cfg)
    print(filled, filled.summary(), repr(filled.cache))
    assert not filled.hit and filled.cache.manifest.rows == 240
    assert raycache.fill(cfg).hit
    run = raycache.train({"cache": "toy", "store": cfg["store"], "epochs": 2, "lr": 0.05,
                          "batch_size": 32, "num_workers": 0, "progress": True})
    print(run, run.spec, run.summary(), raycache.ls(cfg["store"]["uri"],),
          raycache.open_cache("toy", cfg["store"]["uri"], **store_options(s3_endpoint)))
    head = run.load_head()  # credentials from the caller's config, not from head.json
    assert head.spec.cache == "toy"
    assert raycache.train({"cache": "toy", "store": cfg["store"], "epochs": 2, "lr": 0.05,
                           "batch_size": 32, "num_workers": 0}).history == run.history

    written = {p: fs.cat_file(p) for p in fs.find(bucket)}
    assert any(p.endswith("head.json") for p in written) and any(
        p.endswith("run.json") for p in written)
    written.update({str(p): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()})
    found = {p: leaks(data) for p, data in written.items() if leaks(data)}
    assert found == {}
    out = capfd.readouterr()
    shown = out.out + out.err + caplog.text
    assert "fill toy" in shown and leaks(shown.encode()) == []
    assert os.environ.get("AWS_ACCESS_KEY_ID") not in VALUES  # the env never took them


def test_head_loads_with_the_callers_options(tmp_path):
    """load_head takes sealed or plain options (a local folder takes none)."""
    from raycache._heads.loaded import load_head

    with pytest.raises(raycache.RaycacheError, match="not a head checkpoint"):
        load_head(str(Path(tmp_path)), **seal({"auto_mkdir": True}))


PASSWORD, CONNECTION = "raycache-password-lmn", "AccountKey=raycache-connection-uvw"


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_predict_on_ray_writes_no_credential_to_rays_session(ray_session, tmp_path):
    """A predict on Ray (Ray Data read tasks, the head's tasks) with credentials in the input's
    options: they reach the tasks, and no file of Ray's session folder (logs, the export events
    of Ray Data's operators, which record their arguments) holds them afterwards."""
    from ray._private.worker import global_worker

    (tmp_path / "source").mkdir()
    pq.write_table(separable(n=120), tmp_path / "source" / "a.parquet")
    store = str(tmp_path / "store")
    raycache.fill(toy_fill(str(tmp_path / "source"), store, in_process=True))
    head = raycache.train({"cache": "toy", "store": {"uri": store}, "num_workers": 0,
                           "progress": False, "epochs": 1}).checkpoint
    out = tmp_path / "out.parquet"
    options = {"password": PASSWORD, "connection_string": CONNECTION}
    result = raycache.predict_file({"checkpoint": head, "input": str(tmp_path / "source"),
                                    "output": str(out), "options": options,
                                    "in_process": False, "progress": False})
    assert result.rows == 120 and "task(s)" in result.where and pq.read_table(out).num_rows == 120
    session = Path(global_worker.node.get_session_dir_path())
    files = [p for p in session.rglob("*") if p.is_file() and p.stat().st_size < 2**26
             and "sockets" not in p.parts]
    assert {str(p) for p in files if any(v.encode() in p.read_bytes()
                                         for v in (PASSWORD, CONNECTION))} == set()
    exports = b"".join(p.read_bytes() for p in session.rglob("event_EXPORT_DATASET_METADATA*"))
    assert b'"connection_string": "<redacted>"' in exports  # the reads' arguments, recorded

"""`raycache.serve`: a head's Ray Serve application on a local Ray answers real HTTP requests on
127.0.0.1 as Head.predict does, merges concurrent requests into one batch (observed in its
metadata), refuses bad requests with a 4xx naming the field and serves the next one."""

import json
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import raycache
from raycache._errors import ConfigError
from raycache._serve.requests import BadRequest, parse
from tests.conftest import free_port

TEXTS = ["Return the sine of y.", "Open the file notes.txt for reading.",
         "Send an HTTP request to example.com.", "Compute the square root of 2.",
         "List the files under /var/log.", "Resolve the host localhost."]


def call(url: str, body: object = None, method: str = "POST") -> tuple[int, dict]:
    data = None if body is None else (body if isinstance(body, bytes)
                                      else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.mark.parametrize("body, status, field", [
    (b"{not json", 400, "body"),
    (b"[1, 2]", 422, "body"),
    (b"{}", 422, "texts"),
    (b'{"texts": []}', 422, "texts"),
    (b'{"texts": ["ok", 3]}', 422, "texts[1]"),
    (b'{"texts": ["ok"], "embeddings": "yes"}', 422, "embeddings"),
    (b'{"text": ["ok"]}', 422, "text"),
    (json.dumps({"texts": ["a"] * 5}).encode(), 413, "texts"),
])
def test_a_bad_request_is_refused_naming_the_field(body, status, field):
    with pytest.raises(BadRequest) as info:
        parse(body, max_texts=4)
    assert (info.value.status, info.value.field) == (status, field)
    assert str(info.value).startswith(field.split("[")[0])


@pytest.mark.parametrize("body, status, field", [
    (b'{"texts": ["a"]}', 422, "texts"),
    (b'{"inputs": {"text": ["a"]}}', 422, "inputs.image"),
    (b'{"inputs": {"text": ["a"], "image": ["x.png"], "more": ["b"]}}', 422, "inputs.more"),
    (b'{"inputs": {"text": ["a", "b"], "image": ["x.png"]}}', 422, "inputs"),
    (b'{"inputs": {"text": ["a"], "image": [null]}}', 422, "inputs.image[0]"),
    (b'{"inputs": {"text": ["a"], "image": ["x"]}, "texts": ["a"]}', 422, "inputs"),
])
def test_a_head_of_two_encoders_takes_inputs_by_column(body, status, field):
    with pytest.raises(BadRequest) as info:
        parse(body, max_texts=4, columns=("text", "image"))
    assert (info.value.status, info.value.field) == (status, field)


@pytest.mark.parametrize("image, read_uris, want", [
    ({"base64": "aGVsbG8="}, False, b"hello"),
    ("data:image/png;base64,aGVsbG8=", False, b"hello"),
    ("s3://bucket/cat.png", True, "s3://bucket/cat.png"),
    ("/etc/passwd", False, "read_uris"),
    ("data:image/png,hello", False, ";base64"),
    ({"base64": "not base64!"}, False, "not base64"),
    (3, False, "expected an image"),
])
def test_an_image_comes_as_its_bytes_and_a_path_only_where_the_server_reads_paths(
        image, read_uris, want):
    body = json.dumps({"inputs": {"text": ["a"], "image": [image]}}).encode()
    if isinstance(want, bytes) or image == want:
        q = parse(body, 4, ("text", "image"), frozenset({"image"}), read_uris)
        assert q.columns == {"text": ["a"], "image": [want]}
        return
    with pytest.raises(BadRequest) as info:
        parse(body, 4, ("text", "image"), frozenset({"image"}), read_uris)
    assert info.value.status == 422 and info.value.field == "inputs.image[0]"
    assert want in str(info.value)


def test_a_good_request_reads_as_its_columns():
    q = parse(b'{"texts": ["a", "b"], "embeddings": true}', max_texts=4)
    assert q.columns == {"text": ["a", "b"]} and q.embeddings and q.rows == 2
    assert parse(b'{"texts": "one"}', max_texts=4).columns == {"text": ["one"]}
    assert parse(b'{"inputs": ["a"]}', max_texts=4, columns=("doc",)).columns == {"doc": ["a"]}
    two = parse(b'{"inputs": {"image": ["s3://b/x.png"], "text": ["a"]}}', max_texts=4,
                columns=("text", "image"))
    assert two.columns == {"text": ["a"], "image": ["s3://b/x.png"]} and two.rows == 1


def test_serve_config_problems_name_each_field():
    with pytest.raises(ConfigError) as info:
        raycache.serve({"checkpoint": "x", "max_batch_size": 0, "port": 0,
                        "route_prefix": "api", "autoscaling": {"max_replicas": 2}})
    text = str(info.value)
    for part in ("max_batch_size=0", "port=0", "route_prefix='api'",
                 "set num_replicas: auto to autoscale"):
        assert part in text


@pytest.mark.timeout(600)
def test_the_app_answers_http_as_head_predict_and_batches(minilm_heads, ray_session):
    from ray import serve

    port = free_port()
    url = raycache.serve({"checkpoint": minilm_heads["linear"], "port": port, "num_cpus": 0.5,
                          "max_batch_size": 8, "batch_wait_timeout_s": 0.5,
                          "name": "head-test"})
    try:
        assert url == f"http://127.0.0.1:{port}/"
        assert call(url + "health", method="GET") == (200, {"status": "ok"})
        head = raycache.load_head(minilm_heads["linear"])
        status, meta = call(url + "metadata", method="GET")
        assert status == 200 and meta["fingerprint"] == head.spec.fingerprint
        assert meta["classes"] == list(head.spec.class_names) and meta["label"] == "topic"

        status, got = call(url, {"texts": TEXTS})
        assert status == 200
        assert got["labels"] == list(head.predict(TEXTS))
        np.testing.assert_allclose(got["probabilities"], head.predict_proba(TEXTS), atol=1e-4)

        with ThreadPoolExecutor(8) as pool:  # 8 clients at once, one text each
            answers = list(pool.map(lambda t: call(url, {"texts": [t]}), TEXTS + TEXTS[:2]))
        assert [a[0] for a in answers] == [200] * 8
        assert [a[1]["labels"][0] for a in answers] == list(head.predict(TEXTS + TEXTS[:2]))
        served = call(url + "metadata", method="GET")[1]["served"]
        assert served["largest_batch"] > 1  # concurrent requests merged: observed
        assert served["batches"] < served["requests"]

        status, err = call(url, b'{"texts": ["fine", 7]}')
        assert status == 422 and err["field"] == "texts[1]" and "expected a string" in err["error"]
        assert call(url, b"nope")[0] == 400
        assert call(url + "nowhere", method="GET")[0] == 404
        status, got = call(url, {"texts": TEXTS[:1], "embeddings": True})
        assert status == 200 and got["labels"] == list(head.predict(TEXTS[:1]))
        assert len(got["embeddings"][0]) == head.spec.in_dim
        status, got = call(url, {"inputs": {"text": TEXTS[:2]}})  # by the encoder's column
        assert status == 200 and got["labels"] == list(head.predict(TEXTS[:2]))
        assert call(url, {"inputs": {"body": TEXTS[:2]}})[1]["field"] == "inputs.text"

        # a similarity head beside it, under its own route: embeddings out, as Head.embed
        similar = raycache.train({"cache": "docs", "store": {"uri": minilm_heads["store"]},
                                  "num_workers": 0, "progress": False, "label": "topic",
                                  "epochs": 2, "objective": "groups", "embedding_dim": 8,
                                  "normalize": True, "groups": {"loss": "infonce"}}).checkpoint
        sim_url = raycache.serve({"checkpoint": similar, "port": port, "num_cpus": 0.25,
                                  "name": "similar", "route_prefix": "/similar"})
        assert sim_url == f"http://127.0.0.1:{port}/similar/"
        status, got = call(sim_url, {"texts": TEXTS[:3]})
        assert status == 200 and "labels" not in got
        np.testing.assert_allclose(got["embeddings"], raycache.load_head(similar).embed(
            TEXTS[:3]), atol=1e-4)
        assert call(sim_url + "metadata", method="GET")[1]["objective"] == "groups"
        assert call(url, {"texts": TEXTS[:1]})[1]["labels"] == list(head.predict(TEXTS[:1]))
    finally:
        serve.shutdown()


def test_serve_cli_refuses_a_missing_checkpoint_before_starting_ray(tmp_path, capsys):
    from raycache._cli import main

    assert main(["serve", "--checkpoint", str(tmp_path / "nope"), "--port", "8123"]) == 3
    err = capsys.readouterr().err
    assert "raycache serve: error:" in err and "is not a head checkpoint" in err



def test_the_replica_code_imports_neither_ray_data_nor_ray_train():
    import subprocess
    import sys

    from tests.conftest import ROOT

    code = ("import json, sys, raycache._serve.app, raycache._serve.run\n"
            "print(json.dumps([m for m in sys.modules if m.split('.')[:2] in "
            "(['ray', 'serve'], ['ray', 'data'], ['ray', 'train'])]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True, env={"PYTHONPATH": str(ROOT)})
    loaded = {".".join(m.split(".")[:2]) for m in json.loads(done.stdout)}
    assert loaded == {"ray.serve"}  # Serve, and neither Ray Data nor Ray Train

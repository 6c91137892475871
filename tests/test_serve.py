"""`raycache.serve`: a head's Ray Serve application on a local Ray answers real HTTP requests on
127.0.0.1 as Head.predict does, merges concurrent requests into one batch (observed in its
metadata), refuses bad requests with a 4xx naming the field and serves the next one; a poisoned
request (a lone surrogate, a huge text, body or image, deep nesting) fails alone, and the
others batched with it are answered right."""

import asyncio
import base64
import dataclasses
import json
import shutil
import struct
import threading
import urllib.error
import urllib.request
import warnings
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from starlette.requests import Request

import raycache
from raycache import ConfigError
from raycache._serve.app import HeadServer
from raycache._serve.config import limits
from raycache._serve.requests import BadRequest, Query, parse, read_body
from tests.conftest import free_port

FOUR = limits(raycache.ServeConfig("ckpt", max_texts=4))

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
        parse(body, FOUR)
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
        parse(body, FOUR, columns=("text", "image"))
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
        q = parse(body, FOUR, ("text", "image"), frozenset({"image"}), read_uris)
        assert q.columns == {"text": ["a"], "image": [want]}
        return
    with pytest.raises(BadRequest) as info:
        parse(body, FOUR, ("text", "image"), frozenset({"image"}), read_uris)
    assert info.value.status == 422 and info.value.field == "inputs.image[0]"
    assert want in str(info.value)


def test_a_good_request_reads_as_its_columns():
    q = parse(b'{"texts": ["a", "b"], "embeddings": true}', FOUR)
    assert q.columns == {"text": ["a", "b"]} and q.embeddings and q.rows == 2
    assert parse(b'{"texts": "one"}', FOUR).columns == {"text": ["one"]}
    assert parse(b'{"inputs": ["a"]}', FOUR, columns=("doc",)).columns == {"doc": ["a"]}
    two = parse(b'{"inputs": {"image": ["s3://b/x.png"], "text": ["a"]}}', FOUR,
                columns=("text", "image"))
    assert two.columns == {"text": ["a"], "image": ["s3://b/x.png"]} and two.rows == 1


def png(width: int, height: int) -> bytes:
    """A valid 1-bit grey PNG of width x height black pixels, tens of KB however many pixels."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))

    z, row = zlib.compressobj(9), bytes(1 + (width + 7) // 8)
    idat = b"".join(z.compress(row) for _ in range(height)) + z.flush()
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 1, 0,
                                                                0, 0, 0))
            + chunk(b"IDAT", idat) + chunk(b"IEND", b""))


def image_body(*images: bytes) -> bytes:
    return json.dumps({"inputs": {"text": ["a"] * len(images), "image": [
        {"base64": base64.b64encode(i).decode()} for i in images]}}).encode()


SMALL = limits(raycache.ServeConfig("ckpt", max_chars=8, max_image_pixels=10_000,
                                    max_request_pixels=25_000, max_body_bytes=1000))


@pytest.mark.parametrize("body, status, field, names", [
    (b'{"texts": ["ok", "\\ud800"]}', 422, "texts[1]", "UTF-8"),
    (b'{"texts": ["ok"], "\\udc00": 1}', 422, "\\udc00", "unknown field"),
    (b'{"texts": ' + b"[" * 100_000, 400, "body", "nested too deep"),
    (image_body(png(20_000, 20_000)), 413, "inputs.image[0]", "max_image_pixels=16777216"),
    (image_body(png(5_000, 5_000)), 413, "inputs.image[0]", "5000x5000 = 25000000 pixels"),
])
def test_a_poisoned_request_is_refused_naming_the_field_and_the_limit(body, status, field,
                                                                      names):
    columns = ("text",) if b"texts" in body else ("text", "image")
    defaults = limits(raycache.ServeConfig("ckpt"))
    with pytest.raises(BadRequest) as info:
        parse(body, defaults, columns, frozenset({"image"}))
    answer = info.value.to_json()
    assert (info.value.status, answer["field"]) == (status, field)
    assert names in answer["error"]
    json.dumps(answer, ensure_ascii=False).encode("utf-8")  # a response holds it: no lone surrogate


def test_images_are_measured_by_their_headers_against_each_limit():
    assert len(png(20_000, 20_000)) < 100_000  # 400 million pixels, never decoded here
    small = png(100, 100)
    q = parse(image_body(small, small), SMALL, ("text", "image"), frozenset({"image"}))
    assert q.columns["image"] == [small, small]
    with pytest.raises(BadRequest) as info:  # 3 x 10,000 pixels: over the request's 25,000
        parse(image_body(small, small, small), SMALL, ("text", "image"), frozenset({"image"}))
    assert info.value.status == 413 and info.value.field == "inputs.image"
    assert "max_request_pixels=25000" in str(info.value)
    with pytest.raises(BadRequest) as info:
        parse(image_body(png(101, 100)), SMALL, ("text", "image"), frozenset({"image"}))
    assert (info.value.status, info.value.field) == (413, "inputs.image[0]")
    assert "101x100 = 10100 pixels, more than max_image_pixels=10000" in str(info.value)


def test_an_image_over_pillows_bomb_limit_as_a_replica_sets_it_is_refused_alike(monkeypatch):
    from PIL import Image

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", SMALL.max_image_pixels)
    with warnings.catch_warnings():  # as HeadServer sets them for a head on images
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        for width in (150, 300):  # over the limit (Pillow warns); over twice it (Pillow raises)
            with pytest.raises(BadRequest) as info:
                parse(image_body(png(width, 100)), SMALL, ("text", "image"),
                      frozenset({"image"}))
            assert (info.value.status, info.value.field) == (413, "inputs.image[0]")
            assert "max_image_pixels=10000" in str(info.value)


def test_a_long_text_is_cut_to_the_character_cap_and_named():
    q = parse(b'{"texts": ["short", "far longer than eight", "exactly8"]}', SMALL)
    assert q.columns == {"text": ["short", "far long", "exactly8"]}
    assert q.truncated == ("texts[1]",)


def request(chunks: list[bytes], method: str = "POST", path: str = "/",
            length: int | None = None) -> tuple[Request, list[int]]:
    """A starlette request as Serve hands it to a replica, and the sizes of the chunks read."""
    headers = [(b"content-type", b"application/json")]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    read: list[int] = []
    chunks = list(chunks)

    async def receive() -> dict:
        chunk = chunks.pop(0) if chunks else b""
        read.append(len(chunk))
        return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

    scope = {"type": "http", "method": method, "path": path, "headers": headers,
             "query_string": b"", "root_path": ""}
    return Request(scope, receive), read


@pytest.mark.parametrize("length", [None, 400])  # chunked (no length) / a false Content-Length
def test_a_body_over_the_limit_is_refused_before_it_is_parsed(length):
    req, read = request([b"{not json" * 30] * 10, length=length)  # 2,700 bytes in 10 chunks
    with pytest.raises(BadRequest) as info:
        asyncio.run(read_body(req, 1000))
    assert info.value.status == 413 and "max_body_bytes=1000" in str(info.value)
    assert len(read) == 4 and sum(read) == 1080  # read no further than past the limit
    req, read = request([b"x" * 10], length=2000)
    with pytest.raises(BadRequest) as info:
        asyncio.run(read_body(req, 1000))
    assert "2000 bytes (its Content-Length)" in str(info.value) and read == []  # none read
    req, _ = request([b"ab", b"cd"], length=4)
    assert asyncio.run(read_body(req, 1000)) == b"abcd"


@pytest.fixture(scope="module")
def replica(minilm_heads):
    """A replica's HeadServer in this process (no Ray), with small limits."""
    return HeadServer(minilm_heads["linear"],
                      limits=dataclasses.replace(SMALL, max_chars=40, max_texts=8,
                                                 max_body_bytes=50_000))


def one_batch(server: HeadServer, n: int):
    """Stands in for @serve.batch off Ray: the first `n` queries to arrive, one batch."""
    waiting: list = []

    async def batched(query: Query):
        done = asyncio.get_running_loop().create_future()
        waiting.append((query, done))
        if len(waiting) == n:
            answers = await server.run_batch([q for q, _ in waiting])
            for (_, future), answer in zip(waiting, answers, strict=True):
                future.set_result(answer)
        return await done

    return batched


async def send(server: HeadServer, bodies: list[bytes]) -> list[tuple[int, dict]]:
    out = await asyncio.gather(*(server(request([b], length=len(b))[0]) for b in bodies))
    return [(r.status_code, json.loads(r.body)) for r in out]


def test_poisoned_requests_among_good_ones_fail_alone(replica, minilm_heads, monkeypatch):
    head = raycache.load_head(minilm_heads["linear"])
    long = "Open the file notes.txt for reading, and then " + "read it " * 40
    good = [json.dumps({"texts": [t]}).encode() for t in TEXTS] + [
        json.dumps({"texts": [long]}).encode()]
    bad = [b'{"texts": ["\\ud800"]}', b"[" * 20_000, b'{"texts": ["' + b"x" * 60_000 + b'"]}']
    monkeypatch.setattr(replica, "batched", one_batch(replica, len(good)))
    got = asyncio.run(send(replica, good[:3] + bad + good[3:]))
    answers = got[:3] + got[6:]
    assert [a[0] for a in answers] == [200] * len(good)
    want = list(head.predict(TEXTS + [long[:40]]))  # the long text as cut to max_chars
    assert [a[1]["labels"][0] for a in answers] == want
    np.testing.assert_allclose([a[1]["probabilities"][0] for a in answers],
                               head.predict_proba(TEXTS + [long[:40]]), atol=1e-5)
    assert answers[-1][1]["truncated"] == ["texts[0]"]
    assert all("truncated" not in a[1] for a in answers[:-1])
    assert [(s, e["field"]) for s, e in got[3:6]] == [(422, "texts[0]"), (400, "body"),
                                                       (413, "body")]
    assert "max_body_bytes=50000" in got[5][1]["error"]


def test_a_batch_that_fails_is_answered_request_by_request(replica, minilm_heads):
    head = raycache.load_head(minilm_heads["linear"])
    poisoned = Query({"text": ["\ud800"]})  # past parse: the tokenizer's own failure
    answers = replica.answer_each([Query({"text": TEXTS[:2]}), poisoned,
                                   Query({"text": TEXTS[2:]})])
    assert isinstance(answers[1], Exception)
    assert answers[0]["labels"] + answers[2]["labels"] == list(head.predict(TEXTS))


def test_the_forward_pass_runs_off_the_event_loop(replica, monkeypatch):
    inside, release = threading.Event(), threading.Event()
    real = replica.answer

    def slow(queries):
        inside.set()
        release.wait(30)  # the test's own timeout, should the loop be blocked
        try:
            return real(queries)
        finally:
            inside.clear()

    monkeypatch.setattr(replica, "answer", slow)
    monkeypatch.setattr(replica, "batched", one_batch(replica, 1))

    async def scenario() -> tuple[bool, int, int]:
        answer = asyncio.create_task(send(replica, [json.dumps({"texts": TEXTS[:1]}).encode()]))
        while not inside.is_set() and not answer.done():
            await asyncio.sleep(0.01)
        health = await replica(request([], "GET", "/health")[0])
        during = inside.is_set()  # the batch still running while health was answered
        release.set()
        return during, health.status_code, (await answer)[0][0]

    assert asyncio.run(scenario()) == (True, 200, 200)


def test_metadata_names_the_checkpoint_not_its_path(replica, minilm_heads):
    meta = replica.metadata()
    checkpoint = Path(minilm_heads["linear"])
    assert meta["checkpoint"] == checkpoint.name and meta["run"] == checkpoint.parent.name
    assert str(minilm_heads["root"]) not in json.dumps(meta)
    assert meta["limits"]["max_chars"] == 40


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
                          "name": "head-test", "max_chars": 200, "max_body_bytes": 30_000})
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

        # poisoned requests among good ones, at once: each fails alone, the others are right
        bodies = [json.dumps({"texts": [t]}).encode() for t in TEXTS]
        poisoned = [b'{"texts": ["\\ud800"]}', b"[" * 20_000,
                    json.dumps({"texts": ["x" * 40_000]}).encode()]
        with ThreadPoolExecutor(9) as pool:
            answers = list(pool.map(lambda b: call(url, b), bodies[:3] + poisoned + bodies[3:]))
        assert [(s, a.get("field")) for s, a in answers[3:6]] == [
            (422, "texts[0]"), (400, "body"), (413, "body")]
        good = answers[:3] + answers[6:]
        assert [s for s, _ in good] == [200] * 6
        assert [a["labels"][0] for _, a in good] == list(head.predict(TEXTS))
        long = "Compute the square root of 2. " * 20
        status, got = call(url, {"texts": [long]})
        assert status == 200 and got["truncated"] == ["texts[0]"]
        assert got["labels"] == list(head.predict([long[:200]]))
        meta = call(url + "metadata", method="GET")[1]
        assert meta["checkpoint"] == Path(minilm_heads["linear"]).name
        assert str(minilm_heads["root"]) not in json.dumps(meta)  # no path of the server's

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


@pytest.mark.parametrize("damage, reason", [
    (lambda head, gone: head["encoder_configs"]["minilm"].update(path=gone), "does not exist"),
    (lambda head, gone: head["weights_digests"].update(minilm="0" * 64),
     "but the head was trained on embeddings of weights 000000000000"),
])
def test_serve_refuses_a_head_whose_encoder_cannot_load_before_starting_ray(
        damage, reason, minilm_heads, tmp_path, monkeypatch, capsys):
    import ray
    from ray import serve as ray_serve

    from raycache._cli import main

    bad = tmp_path / "checkpoint_000001"
    shutil.copytree(minilm_heads["linear"], bad)
    saved = json.loads((bad / "head.json").read_text())
    damage(saved["head"], str(tmp_path / "gone"))
    (bad / "head.json").write_text(json.dumps(saved))

    def started(*args, **kwargs):
        raise AssertionError("Ray or Serve was started before the encoders were checked")

    monkeypatch.setattr(ray, "init", started)
    monkeypatch.setattr(ray_serve, "start", started)
    assert main(["serve", "--checkpoint", str(bad), "--port", "8123"]) == 3
    err = capsys.readouterr().err
    assert "raycache serve: error:" in err and "encoder 'minilm'" in err and reason in err


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

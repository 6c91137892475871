"""A served head speaks the shapes clients already send: the openai client's embeddings (of the
head, or of its encoder by name; floats or base64, usage counted), TEI's /embed, /predict and
/info, an OpenAPI schema at /docs, Prometheus /metrics; builder arguments given as strings are
typed and checked; a deployment's user_config retunes batching without a restart."""

import base64
import json
import urllib.error
import urllib.request

import numpy as np
import pytest

import raycache
from raycache import ConfigError
from raycache._serve import shapes
from raycache._serve.app import HeadServer
from raycache._serve.config import limits
from raycache._serve.requests import BadRequest
from raycache._serve.run import typed
from tests.conftest import free_port

TEXTS = ["Return the sine of y.", "Open the file notes.txt for reading.",
         "Send an HTTP request to example.com."]
LIMITS = limits(raycache.ServeConfig("ckpt", max_texts=4))


def call(url: str, body: object = None) -> tuple[int, object, str]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            text = resp.read().decode()
            kind = resp.headers.get("content-type", "")
            return resp.status, json.loads(text) if "json" in kind else text, kind
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()), ""


@pytest.mark.parametrize("body, status, field", [
    (b"nope", 400, "body"),
    (b'{"input": "a", "model": "gpt-4"}', 404, "model"),
    (b'{"input": "a", "model": "m", "encoding_format": "int8"}', 422, "encoding_format"),
    (b'{"input": [1, 2, 3], "model": "m"}', 422, "input"),
    (b'{"input": ["a", 7], "model": "m"}', 422, "input[1]"),
    (b'{"input": ["a", "b", "c", "d", "e"], "model": "m"}', 413, "input"),
    (b'{"model": "m"}', 422, "input"),
    (b'{"input": "a", "model": "m", "temperature": 1}', 422, "temperature"),
])
def test_an_openai_request_is_refused_naming_the_field(body, status, field):
    with pytest.raises(BadRequest) as info:
        shapes.openai_query(body, LIMITS, {"m": "text"}, "m")
    assert (info.value.status, info.value.field) == (status, field)
    assert shapes.openai_error(info.value)["error"]["param"] == field


def test_openai_and_tei_bodies_read_as_queries_and_answers():
    query, model, fmt = shapes.openai_query(b'{"input": "a b", "encoding_format": "base64"}',
                                            LIMITS, {"m": "text"}, "m")
    assert (query.columns, query.model, model, fmt) == ({"text": ["a b"]}, "m", "m", "base64")
    vectors = np.array([[1.5, -2.0], [0.25, 3.0]], np.float32)
    reply = shapes.openai_reply(vectors, "m", "base64", 7)
    decoded = [np.frombuffer(base64.b64decode(d["embedding"]), "<f4") for d in reply["data"]]
    np.testing.assert_array_equal(decoded, vectors)
    assert [(d["object"], d["index"]) for d in reply["data"]] == [("embedding", 0),
                                                                   ("embedding", 1)]
    assert reply["usage"] == {"prompt_tokens": 7, "total_tokens": 7}
    query, normalize = shapes.tei_embed_query(b'{"inputs": ["x", "y"], "normalize": false}',
                                              LIMITS, "text", "m")
    assert query.columns == {"text": ["x", "y"]} and normalize is False
    assert np.allclose(np.linalg.norm(shapes.tei_embeddings(vectors, True), axis=1), 1)
    assert shapes.tei_shaped(b'{"inputs": "x"}') and not shapes.tei_shaped(b'{"texts": ["x"]}')
    assert not shapes.tei_shaped(b'{"inputs": {"text": ["x"]}}')
    answer = {"labels": ["b"], "probabilities": [[0.2, 0.7, 0.1]]}
    assert shapes.tei_predictions(answer, ["a", "b", "c"], True) == [
        {"label": "b", "score": 0.7}, {"label": "a", "score": 0.2}, {"label": "c", "score": 0.1}]
    with pytest.raises(BadRequest) as info:
        shapes.tei_predict_query(b'{"inputs": "x", "raw_scores": true}', LIMITS, "text")
    assert info.value.field == "raw_scores"


def test_builder_arguments_given_as_strings_are_typed_and_checked(minilm_heads):
    args = {"checkpoint": minilm_heads["linear"], "max_batch_size": "8", "port": "8001",
            "batch_wait_timeout_s": "0.5", "num_replicas": "2", "trust_code": "false",
            "name": "123"}
    got = typed(args)
    assert got == {**args, "max_batch_size": 8, "port": 8001, "batch_wait_timeout_s": 0.5,
                   "num_replicas": 2, "trust_code": False, "name": "123"}
    assert typed({"num_gpus": "auto", "num_replicas": "auto"}) == {"num_gpus": "auto",
                                                                   "num_replicas": "auto"}
    app = raycache.serve_app(args)  # as `serve run raycache:serve_app max_batch_size=8` does
    assert type(app).__name__ == "Application"
    with pytest.raises(ConfigError) as info:
        raycache.serve_app({"checkpoint": "c", "max_batch_size": "eight"})
    assert "max_batch_size='eight': expected int" in str(info.value)
    with pytest.raises(ConfigError, match="port=0: expected a whole number in 1..65535"):
        raycache.serve_app({"checkpoint": "c", "port": "0"})


@pytest.fixture(scope="module")
def similar(minilm_heads):
    """A similarity head on the MiniLM cache, trained in this process."""
    return raycache.train({"cache": "docs", "store": {"uri": minilm_heads["store"]},
                           "num_workers": 0, "progress": False, "label": "topic", "epochs": 2,
                           "objective": "groups", "embedding_dim": 8, "normalize": True,
                           "groups": {"loss": "infonce"}}).checkpoint


def test_reconfigure_retunes_batching_and_limits_and_refuses_the_rest(minilm_heads):
    replica = HeadServer(minilm_heads["linear"], max_batch_size=8)
    replica.reconfigure({"max_batch_size": 3, "batch_wait_timeout_s": 0.25, "max_texts": 5})
    assert replica.batched._get_max_batch_size() == 3
    assert replica.batched._get_batch_wait_timeout_s() == 0.25
    info = replica.info()
    assert (info["max_batch_requests"], info["batch_wait_timeout_s"],
            info["max_client_batch_size"]) == (3, 0.25, 5)
    with pytest.raises(ConfigError) as err:
        replica.reconfigure({"max_batch_size": 0, "port": 9})
    assert "user_config.port: not retuned without a restart" in str(err.value)
    with pytest.raises(ConfigError) as err:
        replica.reconfigure({"max_batch_size": 0})
    assert "max_batch_size=0" in str(err.value)
    assert replica.batched._get_max_batch_size() == 3  # a refused config changes nothing


def test_a_classifier_serves_its_penultimate_layer_and_its_encoder(minilm_heads):
    head = raycache.load_head(minilm_heads["mlp"])
    x = head.features(TEXTS)
    hidden = head.embed_embeddings(x, "penultimate")
    assert hidden.shape == (3, 16)
    model, z = head.model, torch_tensor(x)
    if hasattr(model, "mean"):  # a standardising head: its inputs scaled first
        model, z = model.inner, (z - model.mean) / model.scale
    want = model[:-1](z).detach().numpy()  # every layer but the output Linear
    np.testing.assert_allclose(hidden, want, atol=1e-5)
    replica = HeadServer(minilm_heads["mlp"], model="topics")
    assert sorted(replica.models.columns) == ["minilm", "topics"]
    got = replica.answer_each([shapes.openai_query(json.dumps({"input": TEXTS, "model": m})
                                                   .encode(), LIMITS, replica.models.columns,
                                                   "topics")[0] for m in ("topics", "minilm")])
    np.testing.assert_allclose(got[0]["vectors"], hidden, atol=1e-5)
    np.testing.assert_allclose(got[1]["vectors"], x, atol=1e-5)
    assert got[0]["tokens"] == got[1]["tokens"] > len(TEXTS)
    assert replica.info()["dims"] == {"minilm": 384, "topics": 16}
    with pytest.raises(raycache.RaycacheError, match="not a layer"):
        head.embed_embeddings(x, "middle")


def torch_tensor(x):
    import torch

    return torch.as_tensor(x, dtype=torch.float32)


@pytest.fixture(scope="module")
def served(minilm_heads, similar, ray_session):
    """Two applications on one Serve: the similarity head (builder arguments as strings, as
    Serve's command line gives them) and the linear classifier under /topics."""
    from ray import serve

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(raycache.serve_app({"checkpoint": similar, "max_batch_size": "4",
                                  "batch_wait_timeout_s": "0.05", "num_cpus": "0.25",
                                  "model": "similar"}),
              name="shapes-similar", route_prefix="/")
    serve.run(raycache.serve_app({"checkpoint": minilm_heads["linear"], "num_cpus": 0.25,
                                  "route_prefix": "/topics"}),
              name="shapes-topics", route_prefix="/topics")
    yield f"http://127.0.0.1:{port}"
    serve.shutdown()


@pytest.mark.timeout(600)
def test_the_openai_client_gets_the_heads_and_the_encoders_embeddings(served, similar,
                                                                      minilm_heads):
    import openai

    client = openai.OpenAI(base_url=f"{served}/v1", api_key="unused", max_retries=0)
    head = raycache.load_head(similar)
    got = client.embeddings.create(model="similar", input=TEXTS)  # the client asks base64
    assert [d.index for d in got.data] == [0, 1, 2] and got.model == "similar"
    np.testing.assert_allclose([d.embedding for d in got.data], head.embed(TEXTS), atol=1e-5)
    assert got.usage.prompt_tokens == got.usage.total_tokens > len(TEXTS)
    one = client.embeddings.create(model="minilm", input=TEXTS[0], encoding_format="float")
    np.testing.assert_allclose(one.data[0].embedding, head.features(TEXTS[:1])[0], atol=1e-5)
    assert [m.id for m in client.models.list().data] == ["minilm", "similar"]
    with pytest.raises(openai.NotFoundError, match="is not served here"):
        client.embeddings.create(model="text-embedding-3-small", input="x")
    with pytest.raises(openai.UnprocessableEntityError, match="input\\[1\\]"):
        client.embeddings.create(model="similar", input=["ok", 7])


@pytest.mark.timeout(600)
def test_tei_routes_info_docs_and_metrics_over_plain_http(served, similar, minilm_heads):
    head = raycache.load_head(similar)
    status, vectors, _ = call(f"{served}/embed", {"inputs": TEXTS, "normalize": False})
    assert status == 200
    np.testing.assert_allclose(vectors, head.embed(TEXTS), atol=1e-5)
    classifier = raycache.load_head(minilm_heads["linear"])
    status, scores, _ = call(f"{served}/topics/predict", {"inputs": TEXTS[1]})
    assert status == 200 and scores[0]["label"] == classifier.predict(TEXTS[1:2])[0]
    proba = dict(zip(classifier.classes, classifier.predict_proba(TEXTS[1:2])[0], strict=True))
    assert {s["label"]: s["score"] for s in scores} == pytest.approx(proba, abs=1e-5)
    status, batch, _ = call(f"{served}/topics/predict", {"inputs": TEXTS})
    assert [b[0]["label"] for b in batch] == list(classifier.predict(TEXTS))
    status, own, _ = call(f"{served}/topics/predict", {"texts": TEXTS[:1]})  # raycache's body
    assert own["labels"] == list(classifier.predict(TEXTS[:1]))
    assert call(f"{served}/predict", {"inputs": "x"})[0] == 422  # a similarity head: no classes
    status, info, _ = call(f"{served}/info")
    assert info["model_id"] == "similar" and info["dims"] == {"minilm": 384, "similar": 8}
    assert info["max_batch_requests"] == 4 and info["model_type"] == {"embedding": {}}
    status, info, _ = call(f"{served}/topics/info")
    assert list(info["model_type"]["classifier"]["id2label"].values()) == classifier.classes
    status, schema, _ = call(f"{served}/topics/openapi.json")
    assert schema["openapi"].startswith("3.") and "/topics/v1/embeddings" in schema["paths"]
    status, page, kind = call(f"{served}/docs")
    assert status == 200 and "text/html" in kind and "/openapi.json" in page
    call(f"{served}/embed", {"inputs": []})  # one refused
    status, text, kind = call(f"{served}/metrics")
    assert status == 200 and kind.startswith("text/plain")
    counts = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
              if line and not line.startswith("#")}
    assert counts['raycache_requests_total{route="/embed",status="200"}'] >= 1
    assert counts['raycache_request_errors_total{route="/embed",status="422"}'] >= 1
    assert counts["raycache_batch_size_count"] >= 2
    assert counts['raycache_request_seconds_count{route="/embed"}'] >= 2

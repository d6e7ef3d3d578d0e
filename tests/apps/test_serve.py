"""The HTTP service, started for real on a loopback port and spoken to over HTTP."""

import asyncio
import base64
import dataclasses
import json
import socket
import threading
import time

import httpx
import numpy as np
import pytest
import uvicorn
from strict_json import loads as strict_loads

from chunktree import order, select
from chunktree.apps.serve import Limits, create_app, server


@pytest.fixture(autouse=True)
def strict_json_answers(monkeypatch):
    """Every response body these tests read must be strict JSON (no NaN or Infinity)."""
    monkeypatch.setattr(httpx.Response, "json", lambda self, **kwargs: strict_loads(self.text))

# One client for every request: a bare httpx.get builds a client and its TLS context each time
# (about 30 ms here), which a suite of a few hundred requests pays for nothing.
HTTP = httpx.Client(timeout=5.0)
SENTENCES = ["The whale surfaced near the ship.", "Ahab paced the quarter-deck all night.",
             "Oil casks filled the hold.", "The white whale was seen again at dawn."]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """``app`` on a real uvicorn server on loopback, configured as ``chunktree serve`` runs it."""

    def __init__(self, app, limits=None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(server.config(app, limits or Limits(), "127.0.0.1", self.port, log_level="error"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if HTTP.get(self.url + "/health").status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise RuntimeError("server did not become healthy")

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def service(embedder):
    limits = Limits(max_texts=8, max_chars=500, max_body=20_000, max_queue=64)
    with Served(create_app(embedder, limits=limits)) as s:
        yield s


def test_openai_client_embeddings_equal_in_process(service, embedder):
    from openai import OpenAI

    client = OpenAI(base_url=service.url + "/v1", api_key="unused")
    reply = client.embeddings.create(model="all-MiniLM-L6-v2", input=SENTENCES)  # base64 on the wire
    got = np.array([d.embedding for d in reply.data], dtype=np.float32)
    np.testing.assert_allclose(got, embedder.embed(SENTENCES), atol=1e-5)
    assert [d.index for d in reply.data] == [0, 1, 2, 3]
    # usage counts content tokens, without the [CLS]/[SEP] the model adds (chunktree's convention)
    assert reply.usage.prompt_tokens == sum(len(embedder.tokenizer.encode(t, add_special_tokens=False).ids)
                                            for t in SENTENCES)
    single = client.embeddings.create(model=embedder.model_id, input="Call me Ishmael.", encoding_format="float")
    np.testing.assert_allclose(single.data[0].embedding, embedder.embed(["Call me Ishmael."])[0], atol=1e-5)
    from openai import NotFoundError

    with pytest.raises(NotFoundError) as unknown:
        client.embeddings.create(model="text-embedding-3-small", input="Call me Ishmael.")
    assert unknown.value.body["code"] == "model_not_found" and unknown.value.body["param"] == "model"
    assert "this server serves 'all-MiniLM-L6-v2'" in unknown.value.body["message"]


def test_openai_client_lists_and_retrieves_the_served_model(service, embedder):
    from openai import NotFoundError, OpenAI

    client = OpenAI(base_url=service.url + "/v1", api_key="unused")
    (model,) = client.models.list().data
    assert model.id == embedder.model_id and model.object == "model" and model.owned_by == "chunktree"
    assert abs(model.created - time.time()) < 24 * 3600
    assert model.model_extra["chunktree"] == {"name": "all-MiniLM-L6-v2", "backend": embedder.backend,
                                              "precision": embedder.precision, "choice": embedder.choice.reason,
                                              "dim": 384, "window": 256, "pooling": "mean", "prompts": {},
                                              "matryoshka": False, "default": True}
    assert client.models.retrieve("all-MiniLM-L6-v2").id == client.models.retrieve(embedder.model_id).id == model.id
    with pytest.raises(NotFoundError) as missing:
        client.models.retrieve("gpt-4")
    assert missing.value.body["code"] == "model_not_found"


@pytest.mark.parametrize("method, path, status", [("GET", "/v1/nothing-here", 404), ("GET", "/v1/order", 405),
                                                  ("DELETE", "/v1/embeddings", 405)])
def test_unknown_paths_and_methods_answer_json_errors(service, method, path, status):
    r = httpx.request(method, service.url + path)
    assert r.status_code == status and r.headers["content-type"].startswith("application/json")
    error = r.json()["error"]
    assert path in error["message"] and error["type"] in ("not_found_error", "invalid_request_error")


def test_base64_is_little_endian_float32(service, embedder):
    r = HTTP.post(service.url + "/v1/embeddings", json={"input": ["abc"], "encoding_format": "base64"})
    v = np.frombuffer(base64.b64decode(r.json()["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(v, embedder.embed(["abc"])[0], atol=1e-6)


def test_order_equals_library(service, embedder):
    q = "Where is the white whale?"
    r = HTTP.post(service.url + "/v1/order", json={"texts": SENTENCES, "query": q, "strategy": "dfs"})
    assert r.status_code == 200
    doc = r.json()
    want = order(embedder.embed(SENTENCES), embedder.embed([q])[0], strategy="dfs")
    assert doc["order"] == want.order.tolist() and doc["root"] == want.root
    assert doc["tree_weight"] == pytest.approx(want.tree_weight, rel=1e-5)
    assert [c["id"] for c in doc["chunks"]] == doc["order"] and doc["chunks"][0]["parent"] is None


MOBY = None


def moby_sentences(n):
    """``n`` distinct sentences of the sample corpus (Moby-Dick), 30-300 characters each."""
    global MOBY
    if MOBY is None:
        import re

        from chunktree import sample_documents

        seen = {}
        for doc in sample_documents():
            for sentence in re.split(r"(?<=[.!?])\s+", " ".join(doc.text.split())):
                if 30 <= len(sentence) <= 300:
                    seen.setdefault(sentence, None)
        MOBY = list(seen)
    return MOBY[:n]


@pytest.fixture(scope="module")
def cached_service(embedder, tmp_path_factory):
    """A service with an embedding cache file and order/select limited to 1,200 chunks."""
    cache = tmp_path_factory.mktemp("served") / "embeddings.sqlite"
    with Served(create_app(embedder, limits=Limits(max_chunks=1_200), cache=cache)) as s:
        s.cache = cache
        yield s


def test_order_and_select_take_a_thousand_texts_and_embed_them_once(cached_service, embedder, cli, tmp_path):
    texts = moby_sentences(1_000)
    q = "Why does Ahab hunt the white whale?"
    first = HTTP.post(cached_service.url + "/v1/order", json={"texts": texts, "query": q}, timeout=120)
    assert first.status_code == 200, first.text
    second = HTTP.post(cached_service.url + "/v1/order", json={"texts": texts, "query": q}, timeout=120)
    assert second.status_code == 200
    a, b = first.json(), second.json()
    assert (a["embedding"]["embedded"], a["embedding"]["cache_hits"]) == (1_000, 0)
    assert (b["embedding"]["embedded"], b["embedding"]["cache_hits"]) == (0, 1_000)  # the second call is served
    assert a["order"] == b["order"] and sorted(a["order"]) == list(range(1_000))
    selected = HTTP.post(cached_service.url + "/v1/select", json={"texts": texts, "k": 20}, timeout=120).json()
    assert selected["embedding"]["cache_hits"] == 1_000 and len(selected["clusters"]) == 20
    # the CLI on the same texts (one JSONL record each, one chunk each) with the same cache file agrees
    (tmp_path / "moby.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    run = cli("--no-progress", "order", tmp_path / "moby.jsonl", "-q", q, "--cache", cached_service.cache,
              "--format", "json")
    assert run.returncode == 0, run.stderr
    printed = json.loads(run.stdout)
    assert printed["n_chunks"] == 1_000 and printed["embedding"]["cache_hits"] == 1_000
    assert printed["order"] == a["order"] and printed["root"] == a["root"]
    run = cli("--no-progress", "select", tmp_path / "moby.jsonl", "-k", "20", "--cache", cached_service.cache,
              "--format", "json")
    def picks(doc):  # the chunks picked; the CLI's also carry their file and offsets
        return [[(r["id"], r["text"], round(r["distance"], 5)) for r in c["representatives"]] for c in doc["clusters"]]

    assert picks(json.loads(run.stdout)) == picks(selected)


def test_order_and_select_take_vectors_and_agree_with_the_cli(cached_service, embedder, cli, tmp_path):
    texts = moby_sentences(300)
    vectors = embedder.embed(texts)
    q = "the white whale"
    by_vectors = HTTP.post(cached_service.url + "/v1/order", json={"vectors": vectors.tolist(), "query": q},
                           timeout=60).json()
    want = order(vectors, embedder.embed([q])[0])
    assert by_vectors["order"] == want.order.tolist() and by_vectors["root"] == want.root
    np.save(tmp_path / "x.npy", vectors)
    run = cli("--no-progress", "order", "--embeddings", tmp_path / "x.npy", "-q", q, "--no-cache", "--format", "json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["order"] == by_vectors["order"]
    picked = HTTP.post(cached_service.url + "/v1/select", json={"vectors": vectors.tolist(), "k": 7}, timeout=60).json()
    assert [[r["id"] for r in c["representatives"]] for c in picked["clusters"]] == \
        [list(c.representatives) for c in select(vectors, 7).clusters]


@pytest.mark.parametrize("payload, status, message", [
    ({"texts": ["a b c"] * 1_201}, 413, "'texts' holds 1,201 texts; the limit is max_chunks=1,200 per request "
                                        "(raise it with chunktree serve --max-chunks N"),
    ({"vectors": [[0.1, 0.2]] * 1_201}, 413, "the limit is max_chunks=1,200"),
    ({"texts": ["a"], "vectors": [[1.0]]}, 422, "one of the two; got 'texts' and 'vectors'"),
    ({}, 422, "one of the two; got neither"),
    ({"vectors": [[1.0, 2.0], [3.0]]}, 422, "'vectors[1]' has 1 numbers; every vector must have the same"),
    ({"vectors": [[1.0, "2"]]}, 422, "'vectors[0][1]' must be a number; got str"),
    ({"vectors": [[1.0, True]]}, 422, "'vectors[0][1]' must be a number; got bool"),
    ({"vectors": [[1.0, 1e39]]}, 422, "'vectors[0][1]' must be a finite float32 number"),
    ({"vectors": [[]]}, 422, "same non-zero length"),
    ({"vectors": "1,2"}, 422, "'vectors' must be a non-empty list of lists of numbers"),
    ({"vectors": [[1.0, 0.0], [0.0, 1.0]], "query": "whale"}, 422, "'vectors' have 2 dims, but 'query' is embedded"),
])
def test_bad_chunks_are_refused_naming_the_field(cached_service, payload, status, message):
    r = HTTP.post(cached_service.url + "/v1/order", json=payload)
    assert r.status_code == status and message in r.json()["error"]["message"], r.text


def test_embeddings_come_from_the_cache_on_a_second_call(cached_service, embedder):
    texts = ["Call me Ishmael, once more.", "Some years ago, never mind how long."]
    first = HTTP.post(cached_service.url + "/v1/embeddings", json={"input": texts}).json()
    second = HTTP.post(cached_service.url + "/v1/embeddings", json={"input": texts}).json()
    assert [d["embedding"] for d in first["data"]] == [d["embedding"] for d in second["data"]]
    assert first["usage"] == second["usage"]
    from chunktree.engine.cache import EmbeddingCache

    with EmbeddingCache(cached_service.cache) as cache:
        stored, found = cache.get(embedder.vectors_id, texts, embedder.dim)
    assert found.all()
    np.testing.assert_allclose(stored, np.array([d["embedding"] for d in first["data"]]), atol=1e-7)


def test_select_equals_library(service, embedder):
    r = HTTP.post(service.url + "/v1/select", json={"texts": SENTENCES, "k": 2, "per_cluster": 2})
    assert r.status_code == 200
    want = select(embedder.embed(SENTENCES), 2, per_cluster=2)
    got = [[rep["id"] for rep in c["representatives"]] for c in r.json()["clusters"]]
    assert got == [list(c.representatives) for c in want.clusters]
    r = HTTP.post(service.url + "/v1/select", json={"texts": SENTENCES, "k": 2, "coverage": True})
    want = select(embedder.embed(SENTENCES), 2, coverage=True)
    assert r.status_code == 200 and r.json()["params"]["coverage"] is True
    assert [c["representatives"][0]["id"] for c in r.json()["clusters"]] == want.representatives


@pytest.mark.parametrize("path, payload, status, message", [
    ("/v1/embeddings", {"input": []}, 422, "'input' must not be empty"),
    ("/v1/embeddings", {"input": 5}, 422, "'input' must be a string or a list of strings; got int"),
    ("/v1/embeddings", {"input": [1.5, 2]}, 422, "a list of token ids or a list of lists of token ids; 'input[0]' is not"),
    ("/v1/embeddings", {"input": [[1, 2], "a"]}, 422, "'input' must be a string, a list of strings, a list of token "
                                                      "ids or a list of lists of token ids; 'input[1]' is not"),
    ("/v1/embeddings", {"input": [[1, 10**9]]}, 422, "ids[0][1] must be a token id of this model, an int in [0, 30522)"),
    ("/v1/embeddings", {"input": ["a"] * 9}, 413, "holds 9 texts; the limit is max_texts=8 per request (raise it "
                                                  "with chunktree serve --max-texts N"),
    ("/v1/embeddings", {"input": ["x" * 501]}, 422, "has 501 characters; the limit is max_chars=500"),
    ("/v1/embeddings", {"input": [""]}, 422, "'input[0]' is an empty string"),
    ("/v1/embeddings", {"input": ["ok", " \n\t"]}, 422, "'input[1]' is only whitespace"),
    ("/v1/order", {"texts": ["a", "   "]}, 422, "'texts[1]' is only whitespace"),
    ("/v1/embeddings", {"input": "a", "encoding_format": "hex"}, 422, "'encoding_format' must be"),
    ("/v1/embeddings", {"input": "a", "dimensions": 10}, 400, "'dimensions' must be 384: its model card does not "
                                                              "declare Matryoshka training"),
    ("/v1/embeddings", ["not", "an", "object"], 422, "must be a JSON object; got list"),
    ("/v1/order", {"texts": SENTENCES, "strategy": "zigzag"}, 422, "strategy must be one of"),
    ("/v1/order", {"texts": SENTENCES, "root": 99}, 422, "root (a chunk index) must be in [0, 3]; got 99"),
    ("/v1/order", {"texts": SENTENCES, "query": " "}, 422, "query must hold visible text"),
    ("/v1/order", {"texts": SENTENCES, "strategy": "dense"}, 422, "needs a query"),
    ("/v1/select", {"texts": SENTENCES}, 422, "'k' (the number of clusters) is required"),
    ("/v1/select", {"texts": SENTENCES, "k": 9}, 422, "k must be in [1, n_chunks=4]; got 9"),
    ("/v1/select", {"texts": SENTENCES, "k": 2, "seed": -1}, 422, "seed must be in [0, 9223372036854775807]; got -1"),
    ("/v1/select", {"texts": SENTENCES, "k": "2"}, 422, "'k' must be int; got str"),
    ("/v1/select", {"texts": SENTENCES, "k": 2, "coverage": 1}, 422, "'coverage' must be bool; got int"),
])
def test_bad_requests(service, path, payload, status, message):
    r = HTTP.post(service.url + path, json=payload)
    assert r.status_code == status and message in r.json()["error"]["message"]
    assert r.json()["error"]["type"] == ("request_too_large" if status == 413 else "invalid_request_error")


def test_responses_equal_the_cli_json(service, embedder, tmp_path, capsys):
    """What /v1/order and /v1/select return is what `chunktree order|select --format json` prints."""
    from chunktree.apps.cli.main import main
    from chunktree.engine.results import PROVENANCE

    corpus = tmp_path / "sentences.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(SENTENCES)))
    q = "Where is the white whale?"

    def cli_json(*args):
        assert main([*args, str(corpus), "--format", "json", "--no-cache"]) == 0
        return strict_loads(capsys.readouterr().out)

    def comparable(doc, rows):
        # Timings, memory and the embedding's cost differ run to run; texts posted carry no provenance.
        doc = {k: v for k, v in doc.items() if k not in ("timings", "memory_mb", "embedding")}
        doc[rows] = [strip(row) for row in doc[rows]]
        return doc

    def strip(row):
        row = {k: v for k, v in row.items() if k not in PROVENANCE}
        if "representatives" in row:
            row["representatives"] = [strip(rep) for rep in row["representatives"]]
        return row

    cli_order = cli_json("order", "--query", q, "--strategy", "dfs")
    texts = [row["text"] for row in sorted(cli_order["chunks"], key=lambda row: row["id"])]
    assert texts == SENTENCES  # one chunk per record
    served = HTTP.post(service.url + "/v1/order", json={"texts": texts, "query": q, "strategy": "dfs"}).json()
    assert set(served) == set(cli_order) and set(served["chunks"][0]) == set(cli_order["chunks"][0])
    assert all(served["chunks"][0][k] is None for k in PROVENANCE)
    assert_close(comparable(served, "chunks"), comparable(cli_order, "chunks"))
    assert set(served["timings"]) | {"chunk_s"} == set(cli_order["timings"])

    cli_select = cli_json("select", "-k", "2", "--per-cluster", "2")
    served = HTTP.post(service.url + "/v1/select", json={"texts": texts, "k": 2, "per_cluster": 2}).json()
    assert set(served) == set(cli_select)
    assert_close(comparable(served, "clusters"), comparable(cli_select, "clusters"))


def assert_close(a, b, path="doc"):
    """Equal JSON values, floats within 1e-5 (the two sides embed in separate model calls)."""
    if isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-5), path
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), path
        for key in a:
            assert_close(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_close(x, y, f"{path}[{i}]")
    else:
        assert a == b, path


def test_error_types_follow_the_status(embedder, monkeypatch):
    limits = Limits(max_body=2_000, max_queue=8)
    with Served(create_app(embedder, api_key="k", limits=limits)) as s:
        auth = {"Authorization": "Bearer k"}
        r = HTTP.post(s.url + "/v1/embeddings", json={"input": "a"})
        assert (r.status_code, r.json()["error"]["type"]) == (401, "authentication_error")
        r = HTTP.post(s.url + "/v1/embeddings", json={"input": ["y" * 300] * 8}, headers=auth)
        assert (r.status_code, r.json()["error"]["type"]) == (413, "request_too_large")
        r = HTTP.post(s.url + "/v1/embeddings", json={"input": [f"z{i}" for i in range(9)]}, headers=auth)  # 9 texts to embed
        assert (r.status_code, r.json()["error"]["type"]) == (503, "server_error")
        assert r.json()["error"]["code"] == "queue_full"

        def broken(*args, **kwargs):
            raise RuntimeError("a bug")

        monkeypatch.setattr("chunktree.apps.serve.routes.order", broken)
        r = HTTP.post(s.url + "/v1/order", json={"texts": ["a", "b"]}, headers=auth)
        assert (r.status_code, r.json()["error"]["type"]) == (500, "server_error")
        assert "a bug" not in r.text  # the traceback goes to the server log, not to the client


@pytest.mark.parametrize("kwargs, message", [
    ({"max_batch": 0}, "max_batch must be >= 1; got 0"),
    ({"max_wait_ms": -1.0}, "max_wait_ms must be a number >= 0.0; got -1.0"),
    ({"max_texts": True}, "max_texts must be an int; got True"),
])
def test_limits_check_themselves(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        Limits(**kwargs)


def test_malformed_json_and_oversized_body(service):
    r = HTTP.post(service.url + "/v1/embeddings", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    r = HTTP.post(service.url + "/v1/embeddings", json={"input": ["y" * 400] * 60})
    assert r.status_code == 413 and "the limit is max_body=20000" in r.json()["error"]["message"]


def test_health_and_metrics(service):
    health = HTTP.get(service.url + "/health").json()
    assert health["status"] == "ok" and health["backend"] in ("openvino", "onnxruntime") and health["precision"]
    HTTP.post(service.url + "/v1/embeddings", json={"input": "count me"})
    text = HTTP.get(service.url + "/metrics").text
    assert 'chunktree_requests_total{path="/v1/embeddings",status="200"}' in text
    assert "chunktree_request_seconds_bucket" in text and "chunktree_batch_size_count" in text
    assert "chunktree_queue_depth" in text


def test_api_key(embedder):
    with Served(create_app(embedder, api_key="s3cret")) as s:
        assert HTTP.post(s.url + "/v1/embeddings", json={"input": "a"}).status_code == 401
        bad = HTTP.post(s.url + "/v1/embeddings", json={"input": "a"}, headers={"Authorization": "Bearer no"})
        assert bad.status_code == 401
        ok = HTTP.post(s.url + "/v1/embeddings", json={"input": "a"}, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200


def test_concurrent_requests_are_batched_and_overload_gives_503(embedder):
    limits = Limits(max_queue=40, max_batch=32, max_wait_ms=20)
    with Served(create_app(embedder, limits=limits)) as s:
        async def burst(n, texts_each):
            async with httpx.AsyncClient(timeout=60) as client:
                return await asyncio.gather(*[
                    client.post(s.url + "/v1/embeddings", json={"input": [f"sentence {i} {j}" for j in range(texts_each)]})
                    for i in range(n)])

        replies = asyncio.run(burst(16, 1))
        assert all(r.status_code == 200 for r in replies)
        metrics = HTTP.get(s.url + "/metrics").text
        calls = float(next(line.split()[-1] for line in metrics.splitlines()
                           if line.startswith("chunktree_batch_size_count")))
        assert calls < 16  # 16 concurrent requests went through fewer model calls
        for r, i in zip(replies, range(16)):
            np.testing.assert_allclose(r.json()["data"][0]["embedding"], embedder.embed([f"sentence {i} 0"])[0],
                                       atol=1e-5)
        overloaded = asyncio.run(burst(12, 8))  # 96 texts against a queue of 40
        codes = [r.status_code for r in overloaded]
        assert 503 in codes and 200 in codes
        busy = next(r for r in overloaded if r.status_code == 503)
        assert busy.headers["Retry-After"] == "1" and "max_queue=40" in busy.json()["error"]["message"]
        recovered = HTTP.post(s.url + "/v1/embeddings", json={"input": ["after the storm"]})
        assert recovered.status_code == 200


def test_metrics_need_the_key_unless_public(embedder):
    with Served(create_app(embedder, api_key="k")) as s:
        assert HTTP.get(s.url + "/metrics").status_code == 401
        assert HTTP.get(s.url + "/metrics", headers={"Authorization": "Bearer k"}).status_code == 200
    with Served(create_app(embedder, api_key="k", metrics_public=True)) as s:
        assert HTTP.get(s.url + "/metrics").status_code == 200


def test_a_chunked_upload_is_refused_as_soon_as_it_passes_the_limit(embedder):
    """No Content-Length: the server must stop reading at max_body, not read 64 MB and then refuse."""
    limits = Limits(max_body=1_000_000)

    async def upload(port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        part = b"x" * 65536
        frame = f"{len(part):x}\r\n".encode() + part + b"\r\n"
        sent = 0
        head = asyncio.ensure_future(reader.readuntil(b"\r\n\r\n"))
        try:
            while not head.done() and sent < 64 * 2**20:
                writer.write(frame)
                await writer.drain()
                sent += len(part)
                await asyncio.sleep(0)  # drain() does not yield while the socket takes data: let the reader look
            if not head.done():
                writer.write(b"0\r\n\r\n")
            return sent, await asyncio.wait_for(head, 30)
        except ConnectionError:  # the server closed the connection after its answer
            return sent, await asyncio.wait_for(head, 30)
        finally:
            writer.close()

    with Served(create_app(embedder, limits=limits)) as s:
        sent, head = asyncio.run(upload(s.port))
    assert head.startswith(b"HTTP/1.1 413")
    assert sent < 24 * 2**20  # the limit plus what the sockets' buffers hold, not the 64 MB on offer


class GatedEmbedder:
    """The real embedder whose model calls wait for ``gate`` and are logged in ``calls``."""

    def __init__(self, embedder):
        self._embedder = embedder
        self.gate, self.busy = threading.Event(), threading.Event()
        self.calls = []

    def __getattr__(self, name):
        return getattr(self._embedder, name)

    def embed(self, texts, **kwargs):
        self.calls.append(list(texts))
        self.busy.set()
        assert self.gate.wait(60)
        return self._embedder.embed(texts, **kwargs)

    def embedded(self):
        return [t for call in self.calls for t in call]


def metric(url, name):
    lines = HTTP.get(url + "/metrics").text.splitlines()
    return sum(float(line.split()[-1]) for line in lines if line.startswith(name))


def post_and_hang_up(port, payload):
    body = json.dumps(payload).encode()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)


def wait_until(condition, seconds=20):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_abandoned_requests_leave_the_queue_unrun(embedder):
    gated = GatedEmbedder(embedder)
    with Served(create_app(gated, limits=Limits(queue_timeout_s=60))) as s:
        replies = []
        holder = threading.Thread(target=lambda: replies.append(
            HTTP.post(s.url + "/v1/embeddings", json={"input": ["hold the model"]}, timeout=60)))
        holder.start()
        assert gated.busy.wait(10)
        for i in range(8):
            post_and_hang_up(s.port, {"input": [f"abandoned {i}"] * 4})
        wait_until(lambda: metric(s.url, 'chunktree_requests_total{path="/v1/embeddings",status="499"}') == 8)
        assert metric(s.url, "chunktree_queue_depth") == 0
        gated.gate.set()
        holder.join(30)
        after = HTTP.post(s.url + "/v1/embeddings", json={"input": ["after the storm"]})
        order_after = HTTP.post(s.url + "/v1/order", json={"texts": SENTENCES})
    assert replies[0].status_code == after.status_code == order_after.status_code == 200
    embedded = gated.embedded()
    assert embedded[:2] == ["hold the model", "after the storm"] and sorted(embedded[2:]) == sorted(SENTENCES)


def test_an_abandoned_order_request_stops_its_worker(embedder):
    gated = GatedEmbedder(embedder)
    with Served(create_app(gated)) as s:
        holder = threading.Thread(target=lambda: HTTP.post(s.url + "/v1/embeddings", json={"input": ["hold"]}))
        holder.start()
        assert gated.busy.wait(10)
        body = json.dumps({"texts": ["never embedded", "nor this"]}).encode()
        with socket.create_connection(("127.0.0.1", s.port)) as sock:
            sock.sendall(b"POST /v1/order HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            wait_until(lambda: metric(s.url, "chunktree_queue_depth") == 2)  # its texts reached the queue
        wait_until(lambda: metric(s.url, 'chunktree_dropped_requests_total{reason="abandoned"}') == 1)
        gated.gate.set()
        holder.join(30)
        assert HTTP.post(s.url + "/v1/embeddings", json={"input": ["next"]}).status_code == 200
    assert gated.embedded() == ["hold", "next"]


def test_queued_work_past_its_deadline_gets_503_and_is_not_run(embedder):
    gated = GatedEmbedder(embedder)
    with Served(create_app(gated, limits=Limits(queue_timeout_s=0.5))) as s:
        holder = threading.Thread(target=lambda: HTTP.post(s.url + "/v1/embeddings", json={"input": ["hold"]}))
        holder.start()
        assert gated.busy.wait(10)
        t0 = time.monotonic()
        late = HTTP.post(s.url + "/v1/embeddings", json={"input": ["too late"]}, timeout=30)
        waited = time.monotonic() - t0
        gated.gate.set()
        holder.join(30)
        assert HTTP.post(s.url + "/v1/embeddings", json={"input": ["next"]}).status_code == 200
    assert late.status_code == 503 and late.json()["error"]["code"] == "queue_timeout"
    assert late.headers["Retry-After"] == "1" and "queue_timeout_s" in late.json()["error"]["message"]
    assert waited < 10
    assert gated.embedded() == ["hold", "next"]


def test_admission_refuses_at_once_what_the_measured_rate_cannot_serve_in_time(embedder):
    gated = GatedEmbedder(embedder)
    with Served(create_app(gated, limits=Limits(queue_timeout_s=2.0, max_chars=5000))) as s:
        threading.Timer(1.0, gated.gate.set).start()
        first = HTTP.post(s.url + "/v1/embeddings", json={"input": ["w" * 1000]}, timeout=30)
        assert first.status_code == 200  # took >= 1 s for 1,000 characters: the rate is <= 1,000 chars/s
        gated.gate.clear()
        gated.busy.clear()
        holder = threading.Thread(target=lambda: HTTP.post(s.url + "/v1/embeddings", json={"input": ["x" * 2500]},
                                                            timeout=30))
        holder.start()
        assert gated.busy.wait(10)  # 2,500 characters ahead: >= 2.5 s of work, past the 2 s deadline
        t0 = time.monotonic()
        refused = HTTP.post(s.url + "/v1/embeddings", json={"input": ["a short one"]}, timeout=30)
        refused_in = time.monotonic() - t0
        gated.gate.set()
        holder.join(30)
        alone = HTTP.post(s.url + "/v1/embeddings", json={"input": ["u" * 3000]}, timeout=30)
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "overloaded"
    assert "past 90% of the queue deadline (queue_timeout_s=2)" in refused.json()["error"]["message"]
    assert int(refused.headers["Retry-After"]) >= 1
    assert refused_in < 1.0  # at once, not after waiting for the deadline
    assert alone.status_code == 200  # nothing ahead of it: admitted, however long it is
    assert [len(t) for t in gated.embedded()] == [1000, 2500, 3000]


DIALOGUE = [("Why did Captain Ahab hunt the white whale Moby Dick across the oceans?", "Revenge for his leg."),
            ("and what colour was it?", "White."),
            ("How long should sourdough bread dough rise before baking in the oven?", None),
            ("Did Ahab's hatred of the white whale Moby Dick doom the Pequod's whaling crew?", "Yes.")]


def test_conversations_place_turns_as_the_library_does(embedder):
    from chunktree.track import Forest

    with Served(create_app(embedder)) as s:
        made = HTTP.post(s.url + "/v1/conversations", json={"id": "c1"})
        assert made.status_code == 200 and made.json() == {"id": "c1", "turns": 0}
        assert HTTP.post(s.url + "/v1/conversations", json={"id": "c1"}).status_code == 409
        replies = [HTTP.post(s.url + "/v1/conversations/c1/turns",
                              json={"user": u, **({"assistant": a} if a else {}), "budget_tokens": 500})
                   for u, a in DIALOGUE]
        assert all(r.status_code == 200 for r in replies)
        local = Forest(embedder)
        want = [local.add(u, a).to_dict() for u, a in DIALOGUE]
        got = [r.json()["decision"] for r in replies]
        assert [g["action"] for g in got] == [w["action"] for w in want] and [g["tree"] for g in got] == [
            w["tree"] for w in want]
        for g, w in zip(got, want):
            for cg, cw in zip(g["candidates"], w["candidates"]):
                assert cg["tree"] == cw["tree"] and abs(cg["fit"] - cw["fit"]) < 1e-5
        assert replies[-1].json()["context"]["messages"] == local.context(500).messages
        forest = HTTP.get(s.url + "/v1/conversations/c1").json()
        assert forest["turns"] == 4 and forest["tree"] == local.show() and "vectors" not in forest["forest"]
        ctx = HTTP.get(s.url + "/v1/conversations/c1/context", params={"budget_tokens": 30}).json()["context"]
        assert ctx == local.context(30).to_dict()
        question = "What did Ahab hunt?"  # asked about the conversation, not added to it
        asked = HTTP.get(s.url + "/v1/conversations/c1/context", params={"budget_tokens": 60, "query": question})
        posted = HTTP.post(s.url + "/v1/conversations/c1/context", json={"budget_tokens": 60, "query": question})
        assert asked.json()["context"] == posted.json()["context"] == local.context(60, query=question).to_dict()
        assert HTTP.get(s.url + "/v1/conversations/c1").json()["turns"] == 4
        blank = HTTP.post(s.url + "/v1/conversations/c1/context", json={"query": " "})
        assert blank.status_code == 422 and blank.json()["error"]["param"] == "query"
        assert HTTP.delete(s.url + "/v1/conversations/c1").json() == {"id": "c1", "deleted": True}
        gone = HTTP.get(s.url + "/v1/conversations/c1")
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "conversation_not_found"


@pytest.mark.parametrize("path, payload, status, message", [
    ("/v1/conversations", {"id": "../etc"}, 422, "a conversation id is a string of 1-64 letters, digits"),
    ("/v1/conversations/nope/turns", {"user": "hello"}, 404, "no conversation 'nope'"),
    ("/v1/conversations/t1/turns", {"user": "  "}, 422, "'user' must be a string with visible text"),
    ("/v1/conversations/t1/turns", {"user": "x" * 501}, 422, "'user' has 501 characters; the limit is max_chars=500"),
    ("/v1/conversations/t1/turns", {"user": "hi", "budget_tokens": 0}, 422, "'budget_tokens' must be a positive int"),
])
def test_conversation_errors(service, path, payload, status, message):
    HTTP.post(service.url + "/v1/conversations", json={"id": "t1"})
    r = HTTP.post(service.url + path, json=payload)
    assert r.status_code == status and message in r.json()["error"]["message"], r.text


def test_conversations_are_bounded_evicted_and_kept_on_disk(embedder, tmp_path):
    limits = Limits(max_conversations=2, max_turns=3)
    with Served(create_app(embedder, limits=limits)) as s:  # no folder: the least recently used is lost
        for c in ("a", "b", "c"):
            HTTP.post(s.url + "/v1/conversations", json={"id": c})
        assert HTTP.get(s.url + "/v1/conversations/a").status_code == 404
        assert HTTP.get(s.url + "/v1/conversations/b").status_code == 200
        for u, _ in DIALOGUE[:3]:
            assert HTTP.post(s.url + "/v1/conversations/b/turns", json={"user": u}).status_code == 200
        full = HTTP.post(s.url + "/v1/conversations/b/turns", json={"user": DIALOGUE[3][0]})
        assert full.status_code == 422 and full.json()["error"]["code"] == "too_many_turns"
        assert metric(s.url, "chunktree_evicted_conversations_total") == 1
    folder = tmp_path / "conversations"
    with Served(create_app(embedder, limits=Limits(max_conversations=1), conversations_dir=folder)) as s:
        HTTP.post(s.url + "/v1/conversations", json={"id": "kept"})
        first = [HTTP.post(s.url + "/v1/conversations/kept/turns", json={"user": u}).json() for u, _ in DIALOGUE[:2]]
        HTTP.post(s.url + "/v1/conversations", json={"id": "other"})  # evicts "kept" from memory
        third = HTTP.post(s.url + "/v1/conversations/kept/turns", json={"user": DIALOGUE[2][0]})
        assert third.status_code == 200 and third.json()["turn"] == 2  # loaded back from its file
    with Served(create_app(embedder, conversations_dir=folder)) as s:  # a restart keeps it
        after = HTTP.get(s.url + "/v1/conversations/kept").json()
        assert after["turns"] == 3 and [first[0]["decision"]["action"], first[1]["decision"]["action"]] == [
            "new_topic", "continue"]
    assert sorted(p.name for p in folder.iterdir()) == [".chunktree.lock", "kept.json", "kept.json.journal", "other.json"]


class SlowEmbedder:
    """The real embedder, but a text holding ``marker`` takes ``seconds`` longer: a slow turn."""

    def __init__(self, inner, marker="SLOW", seconds=1.5):
        self.inner, self.marker, self.seconds = inner, marker, seconds

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def embed(self, texts, **kwargs):
        if any(self.marker in t for t in texts):
            time.sleep(self.seconds)
        return self.inner.embed(texts, **kwargs)


def test_an_evicted_conversation_read_during_its_turn_loses_nothing(embedder, tmp_path):
    folder = tmp_path / "conversations"
    app = create_app(SlowEmbedder(embedder), limits=Limits(max_conversations=1), conversations_dir=folder)
    with Served(app) as s:
        HTTP.post(s.url + "/v1/conversations", json={"id": "a"})
        slow = {}
        worker = threading.Thread(target=lambda: slow.update(r=HTTP.post(
            s.url + "/v1/conversations/a/turns", json={"user": "SLOW: why did Ahab hunt the whale?"}, timeout=30)))
        worker.start()
        time.sleep(0.5)  # the turn is being embedded
        HTTP.post(s.url + "/v1/conversations", json={"id": "b"})  # evicts "a" from memory
        read = HTTP.get(s.url + "/v1/conversations/a", timeout=30)  # waits for the turn, then reads it
        worker.join()
        assert slow["r"].status_code == 200 and slow["r"].json()["turn"] == 0
        assert read.status_code == 200 and read.json()["turns"] == 1
        nxt = HTTP.post(s.url + "/v1/conversations/a/turns", json={"user": "and what colour was it?"})
        assert nxt.json()["turn"] == 1  # a new number: the acknowledged turn 0 is kept
        assert HTTP.get(s.url + "/v1/conversations/a").json()["turns"] == 2


def test_a_failed_save_changes_nothing(embedder, tmp_path):
    folder = tmp_path / "conversations"
    with Served(create_app(embedder, conversations_dir=folder)) as s:
        (folder / "n.json").mkdir()  # its file cannot be written
        r = HTTP.post(s.url + "/v1/conversations", json={"id": "n"})
        assert r.status_code == 500 and "could not be saved" in r.json()["error"]["message"]
        (folder / "n.json").rmdir()
        assert HTTP.post(s.url + "/v1/conversations", json={"id": "n"}).status_code == 200  # the id was not taken
        (folder / "n.json").rename(folder / "n.bak")
        (folder / "n.json").mkdir()
        r = HTTP.post(s.url + "/v1/conversations/n/turns", json={"user": "Why did Ahab hunt the whale?"})
        assert r.status_code == 500 and "was not kept" in r.json()["error"]["message"]
        (folder / "n.json").rmdir()
        (folder / "n.bak").rename(folder / "n.json")
        again = HTTP.post(s.url + "/v1/conversations/n/turns", json={"user": "Why did Ahab hunt the whale?"})
        assert again.status_code == 200 and again.json()["turn"] == 0  # the failed one was not applied
        assert HTTP.get(s.url + "/v1/conversations/n").json()["turns"] == 1


def test_a_folder_that_cannot_be_written_is_refused_at_startup(embedder, tmp_path):
    from chunktree.checks import InvalidValueError

    (tmp_path / "file").write_text("")
    with pytest.raises(InvalidValueError, match=r"conversations_dir .*file/c: cannot create it or write in it"):
        create_app(embedder, conversations_dir=tmp_path / "file" / "c")


def test_a_text_that_is_not_unicode_fails_only_its_own_request(service):
    bad = b'{"input": ["fine", "bad \\ud800 text"]}'
    results = {}

    def call(i):
        if i == 3:
            results[i] = HTTP.post(service.url + "/v1/embeddings", content=bad,
                                    headers={"content-type": "application/json"})
        else:
            results[i] = HTTP.post(service.url + "/v1/embeddings", json={"input": [f"good text {i}"]})

    threads = [threading.Thread(target=call, args=(i,)) for i in range(7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [results[i].status_code for i in range(7)] == [200, 200, 200, 422, 200, 200, 200]
    error = results[3].json()["error"]
    assert "'input[1]' is not valid Unicode: a lone surrogate '\\ud800' at character 4" in error["message"]
    HTTP.post(service.url + "/v1/conversations", json={"id": "u1"})
    turn = HTTP.post(service.url + "/v1/conversations/u1/turns", content=b'{"user": "bad \\ud800"}',
                      headers={"content-type": "application/json"})
    assert turn.status_code == 422 and "'user' is not valid Unicode" in turn.json()["error"]["message"]


def test_the_lock_table_holds_only_requests_in_flight(embedder):
    app = create_app(embedder)
    with Served(app) as s, httpx.Client(base_url=s.url) as client:
        for i in range(40):
            client.get(f"/v1/conversations/missing{i}")
            client.post(f"/v1/conversations/missing{i}/turns", json={"user": "hello"})
            client.post(f"/v1/conversations/bad%20id{i}/turns", json={"user": "hello"})
        service = next(c.cell_contents for c in app.router.routes[0].endpoint.__closure__
                       if type(c.cell_contents).__name__ == "Service")
        assert service.conversations._locks == {}


@pytest.mark.parametrize("query, body", [("budget_tokens=%C2%B2", None), ("budget_tokens=" + "9" * 5_000, None),
                                         (None, b"[" * 5_000 + b"]" * 5_000)])
def test_odd_inputs_get_4xx_not_500(service, query, body):
    HTTP.post(service.url + "/v1/conversations", json={"id": "odd"})
    if query:
        r = HTTP.get(service.url + "/v1/conversations/odd/context?" + query)
    else:
        r = HTTP.post(service.url + "/v1/conversations/odd/turns", content=body,
                       headers={"content-type": "application/json"})
    assert 400 <= r.status_code < 500, r.text


def test_a_retried_turn_that_was_kept_is_refused_not_added_twice(embedder, tmp_path):
    with Served(create_app(embedder, conversations_dir=tmp_path)) as s:
        HTTP.post(s.url + "/v1/conversations", json={"id": "r"})
        first = HTTP.post(s.url + "/v1/conversations/r/turns", json={"user": "How long should dough rise?", "turn": 0})
        assert first.status_code == 200 and first.json()["turn"] == 0
        again = HTTP.post(s.url + "/v1/conversations/r/turns", json={"user": "How long should dough rise?", "turn": 0})
        assert again.status_code == 409 and again.json()["error"]["code"] == "turn_mismatch"
        assert ("'turn' is 0, but the conversation holds 1 turn, so this turn would be turn 1; turn 0 is "
                "'How long should dough rise?'") in again.json()["error"]["message"]
        ahead = HTTP.post(s.url + "/v1/conversations/r/turns", json={"user": "And how warm?", "turn": 5})
        assert ahead.status_code == 409
        bad = HTTP.post(s.url + "/v1/conversations/r/turns", json={"user": "And how warm?", "turn": "1"})
        assert bad.status_code == 422 and "'turn' must be int" in bad.text
        nxt = HTTP.post(s.url + "/v1/conversations/r/turns", json={"user": "And how warm?", "turn": 1})
        assert nxt.status_code == 200 and nxt.json()["turn"] == 1
        assert [n["user"] for n in HTTP.get(s.url + "/v1/conversations/r").json()["forest"]["nodes"]] == [
            "How long should dough rise?", "And how warm?"]


@pytest.mark.parametrize("which", ["thresholds", "file"])
def test_conversations_use_the_decider_the_server_was_given(embedder, tmp_path, which):
    from chunktree.track import Forest
    from chunktree.track.learned import DeciderFileError, default_decider

    decider = which
    if which == "file":  # a decider of its own: the shipped one turned around, p -> 1 - p
        decider = tmp_path / "d.npz"
        shipped = default_decider()
        dataclasses.replace(shipped, weights=-shipped.weights).save(decider)
    with Served(create_app(embedder, decider=decider)) as s:
        HTTP.post(s.url + "/v1/conversations", json={"id": "c"})
        got = [HTTP.post(s.url + "/v1/conversations/c/turns", json={"user": u}).json()["decision"] for u, _ in DIALOGUE]
    local = Forest(embedder, decider=decider)
    want = [local.add(u).to_dict() for u, _ in DIALOGUE]
    assert [(g["action"], g["tree"]) for g in got] == [(w["action"], w["tree"]) for w in want]
    probabilities = [c["probability"] for g in got for c in g["candidates"]]
    if which == "file":
        shipped_forest = Forest(embedder)
        assert [shipped_forest.add(u).action for u, _ in DIALOGUE] != [g["action"] for g in got]
        assert probabilities and all(p is not None for p in probabilities)
    else:
        assert all(p is None for p in probabilities)
    (tmp_path / "junk.npz").write_bytes(b"junk")
    with pytest.raises(DeciderFileError, match=r"junk\.npz: not a decider file"):
        create_app(embedder, decider=tmp_path / "junk.npz")


# The hostile round: what a careless or hostile client sends. Each answer is a 4xx that names the
# field, short whatever the client sent, and never a 500.
@pytest.mark.parametrize("path, body, status, message", [
    ("/v1/order", {"texts": SENTENCES, "query": "x" * 501}, 422, "'query' has 501 characters; the limit is max_chars=500"),
    ("/v1/order", {"texts": SENTENCES, "strategy": "x" * 19_000}, 422, "strategy must be one of"),
    ("/v1/embeddings", {"input": "a", "model": "m" * 19_000}, 404, "is not served here"),
    ("/v1/select", {"texts": SENTENCES, "k": 2, "seed": 2**70}, 422, "'seed' is out of range: an integer of 22 digits"),
    ("/v1/order", {"vectors": [[0.0, 0.0], [1.0, 0.0]]}, 422, "'vectors[0]' is all zeros"),
    ("/v1/order", {"vectors": [[1.0, 0.0]], "query": "whale"}, 422, "'vectors' have 2 dims"),
    ("/v1/select", {"texts": SENTENCES, "k": 10**30}, 422, "'k' is out of range: an integer of 31 digits"),
    ("/v1/select", {"texts": SENTENCES, "k": 10**9}, 422, "k must be in [1, n_chunks=4]"),
    ("/v1/conversations/t1/turns", {"user": {"nested": ["x"]}}, 422, "'user' must be str; got dict"),
    ("/v1/conversations/t1/turns", {"user": "hi", "budget_tokens": 1e30}, 422, "'budget_tokens' must be a positive int"),
])
def test_hostile_bodies_get_short_named_refusals(service, path, body, status, message):
    HTTP.post(service.url + "/v1/conversations", json={"id": "t1"})
    r = HTTP.post(service.url + path, json=body)
    assert r.status_code == status and message in r.json()["error"]["message"], r.text[:300]
    assert len(r.content) < 600  # the client's value is not echoed whole


@pytest.mark.parametrize("raw, status, message", [
    (b"", 400, "not valid JSON"), (b"null", 422, "must be a JSON object; got NoneType"),
    (b'{"texts": ["a b"], "query": NaN}', 422, "'query' must be str; got float"),
    (b'{"texts": ["a b"], "texts": 5}', 422, "'texts' must be a list of strings"),  # the last duplicate key counts
    (b"\xff\xfe{}", 400, "not valid JSON"),
])
def test_malformed_bodies_are_named(service, raw, status, message):
    r = HTTP.post(service.url + "/v1/order", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == status and message in r.json()["error"]["message"], r.text


def test_unknown_conversations_are_404_on_every_endpoint(service):
    for method, path in (("GET", "/v1/conversations/ghost"), ("GET", "/v1/conversations/ghost/context"),
                         ("DELETE", "/v1/conversations/ghost"), ("POST", "/v1/conversations/ghost/turns")):
        r = HTTP.request(method, service.url + path, json={"user": "hi"} if method == "POST" else None)
        assert r.status_code == 404 and r.json()["error"]["code"] == "conversation_not_found", (method, path, r.text)


def test_concurrent_turns_on_one_conversation_each_get_a_turn_of_their_own(service):
    import concurrent.futures

    HTTP.post(service.url + "/v1/conversations", json={"id": "crowd"})
    texts = [f"Question {i}: how long should the dough rest before baking?" for i in range(8)]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda t: httpx.post(service.url + "/v1/conversations/crowd/turns",
                                                     json={"user": t}, timeout=60), texts))
    assert {r.status_code for r in answers} == {200}
    assert sorted(r.json()["turn"] for r in answers) == list(range(8))  # no turn lost, none twice
    forest = HTTP.get(service.url + "/v1/conversations/crowd").json()
    assert forest["turns"] == 8 and sorted(node["user"] for node in forest["forest"]["nodes"]) == sorted(texts)


# -- the hostile round: one writer per folder, slow and greedy clients, shutdown, odd values --

def test_a_second_server_on_one_conversations_folder_is_refused(embedder, tmp_path):
    """The hostile round's NH-1: two servers on one folder both acknowledged turns, and a restart
    kept only some of them. The lock is an flock, so another process sees it too."""
    import subprocess
    import sys

    from chunktree.checks import InvalidValueError

    folder = tmp_path / "conversations"
    with Served(create_app(embedder, conversations_dir=folder)) as s:
        with pytest.raises(InvalidValueError, match=r"conversations is in use by chunktree serve \(pid \d+"):
            create_app(embedder, conversations_dir=folder)
        HTTP.post(s.url + "/v1/conversations", json={"id": "shared"})
        for i in range(4):
            assert HTTP.post(s.url + "/v1/conversations/shared/turns", json={"user": f"turn {i} about bread?"}
                             ).status_code == 200
        other = subprocess.run([sys.executable, "-m", "chunktree", "serve", "--conversations", str(folder),
                                "--port", str(free_port())], capture_output=True, text=True, timeout=120)
        assert other.returncode == 2 and "is in use by chunktree serve" in other.stderr
    with Served(create_app(embedder, conversations_dir=folder)) as s:  # released at shutdown; all 4 kept
        assert HTTP.get(s.url + "/v1/conversations/shared").json()["turns"] == 4


@pytest.fixture(scope="module")
def guarded(embedder):
    limits = Limits(max_header_kb=16, header_timeout_s=1.0, body_timeout_s=1.0, max_connections=20)
    with Served(create_app(embedder, limits=limits), limits) as s:
        yield s


def _raw(port):
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _answer(sock):
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_a_request_head_past_the_limit_is_431_and_others_are_served(guarded):
    sock = _raw(guarded.port)
    sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: ")
    try:
        for _ in range(64):  # 4 MiB of one header, as fast as the server takes it
            sock.sendall(b"a" * 65536)
    except (BrokenPipeError, ConnectionResetError):
        pass  # refused part way: what the test wants
    answer = _answer(sock)
    assert answer.startswith(b"HTTP/1.1 431 ") and b"longer than 16 KiB" in answer
    with httpx.Client(timeout=5.0) as fresh:
        assert fresh.get(guarded.url + "/health").status_code == 200


@pytest.mark.parametrize("sent", [b"", b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\n",
                                  b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"])
def test_a_request_sent_too_slowly_is_408_and_closed(guarded, sent):
    sock = _raw(guarded.port)
    sock.sendall(sent)
    answer = _answer(sock)  # returns when the server closes; a server without deadlines would hold it
    assert answer.startswith(b"HTTP/1.1 408 ") and b"did not arrive within 1 s" in answer


def test_connections_past_the_limit_are_503_and_the_rest_still_served(guarded):
    held = [_raw(guarded.port) for _ in range(20)]
    try:
        extra = [_raw(guarded.port) for _ in range(5)]
        answers = [_answer(s) for s in extra]
        assert all(a.startswith(b"HTTP/1.1 503 ") and b"too many open connections" in a for a in answers)
    finally:
        for s in held:
            s.close()
    with httpx.Client(timeout=5.0) as fresh:
        for _ in range(100):  # the server sees the closes on its next turns of the loop
            if fresh.get(guarded.url + "/health").status_code == 200:
                break
            time.sleep(0.05)
        assert fresh.get(guarded.url + "/health").status_code == 200


def test_sigterm_ends_the_server_while_a_client_holds_a_body_open(tmp_path):
    """The hostile round's NH-15: a client that never finished its body kept the process alive."""
    import signal
    import subprocess
    import sys

    port = free_port()
    server_process = subprocess.Popen([sys.executable, "-m", "chunktree", "serve", "--port", str(port), "--no-cache",
                                       "--body-timeout", "600", "--shutdown-timeout", "1"],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if HTTP.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        sock = _raw(port)
        sock.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
        time.sleep(0.2)
        server_process.send_signal(signal.SIGTERM)
        assert server_process.wait(timeout=30) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal it handled
        sock.close()
    finally:
        server_process.kill()
        server_process.wait()


def test_loading_a_conversation_leaves_the_event_loop_free(embedder, tmp_path, monkeypatch):
    """A long conversation takes seconds to load (NH-16): /health is answered while it loads."""
    from chunktree.track import Forest

    folder = tmp_path / "conversations"
    with Served(create_app(embedder, conversations_dir=folder)) as s:
        HTTP.post(s.url + "/v1/conversations", json={"id": "long"})
        HTTP.post(s.url + "/v1/conversations/long/turns", json={"user": "Why did Ahab hunt the whale?"})
    loading, loaded = threading.Event(), threading.Event()
    real_load = Forest.load.__func__

    def slow_load(cls, *args, **kwargs):  # stands in for a file of 100,000 turns
        loading.set()
        time.sleep(3)
        forest = real_load(cls, *args, **kwargs)
        loaded.set()
        return forest

    monkeypatch.setattr(Forest, "load", classmethod(slow_load))
    with Served(create_app(embedder, conversations_dir=folder)) as s:
        reader = threading.Thread(target=lambda: HTTP.get(s.url + "/v1/conversations/long", timeout=30))
        reader.start()
        assert loading.wait(10)
        assert HTTP.get(s.url + "/health").status_code == 200
        assert not loaded.is_set()  # answered while the load was still running
        reader.join()
        assert loaded.is_set()


@pytest.mark.parametrize("payload", [
    {"vectors": [[int("9" * 4000), 1], [1, 2]]},
    {"texts": ["a b", "c d"], "k": 1, "per_cluster": 10**30},
    {"texts": ["a b", "c d"], "k": 1, "seed": -(10**20)},
])
def test_integers_past_64_bits_are_422(service, payload):
    path = "/v1/order" if "vectors" in payload else "/v1/select"
    r = HTTP.post(service.url + path, json=payload)
    assert r.status_code == 422, r.text
    assert "digits" in r.json()["error"]["message"]


@pytest.mark.parametrize("text", ["\u200b\u200b", "\ufeff", "\u0000", "\u0001\u0002", "\u202e \u200f"])
def test_texts_of_only_invisible_characters_are_422(service, text):
    r = HTTP.post(service.url + "/v1/embeddings", json={"input": ["fine text", text]})
    assert r.status_code == 422 and "input[1]" in r.json()["error"]["message"]
    assert "zero-width or control characters" in r.json()["error"]["message"]


@pytest.mark.parametrize("damage, message", [
    (lambda d: d["trees"][0].update(last_turn=-10**30), "trees[0].last_turn"),
    (lambda d: d["trees"][0].update(last_turn=2**63), "trees[0].last_turn"),
    (lambda d: d.update(summary_tokens=0), "summary_tokens: 0"),
])
def test_a_damaged_conversation_file_is_500_without_the_servers_paths(embedder, tmp_path, damage, message):
    folder = tmp_path / "conversations"
    with Served(create_app(embedder, conversations_dir=folder)) as s:
        HTTP.post(s.url + "/v1/conversations", json={"id": "bad"})
        HTTP.post(s.url + "/v1/conversations/bad/turns", json={"user": "Why did Ahab hunt the whale?"})
    from chunktree.track import Forest

    Forest.load(folder / "bad.json", embedder).save(folder / "bad.json")  # the turn out of the journal
    data = json.loads((folder / "bad.json").read_text(encoding="utf-8"))
    damage(data)
    (folder / "bad.json").write_text(json.dumps(data), encoding="utf-8")
    with Served(create_app(embedder, conversations_dir=folder)) as s:
        for r in (HTTP.get(s.url + "/v1/conversations/bad"),
                  HTTP.post(s.url + "/v1/conversations/bad/turns", json={"user": "and then?"})):
            error = r.json()["error"]["message"]
            assert r.status_code == 500 and message in error and "bad.json" in error
            assert str(tmp_path) not in error


# -- our own hostile round (OH-n in the note): the service --

def test_oh27_two_hundred_pipelined_requests_are_answered_in_order(guarded):
    sock = _raw(guarded.port)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" * 199 + b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    answer = _answer(sock)
    assert answer.count(b"HTTP/1.1 200 ") == 200


@pytest.mark.parametrize("sent", [
    b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 50\r\n\r\n",   # OH-28
    b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n{\r\n",        # OH-29
])
def test_oh28_29_a_body_promised_and_never_sent_is_408(guarded, sent):
    sock = _raw(guarded.port)
    sock.sendall(sent)
    answer = _answer(sock)
    assert b"HTTP/1.1 408 " in answer and b"the request body did not arrive within 1 s" in answer


def test_oh30_a_header_with_bytes_that_are_not_ascii_is_400_or_served(guarded):
    sock = _raw(guarded.port)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Name: \xff\xfe\x00\r\nConnection: close\r\n\r\n")
    answer = _answer(sock)
    assert answer.startswith((b"HTTP/1.1 400 ", b"HTTP/1.1 200 "))


def test_oh31_many_small_headers_past_the_limit_are_431(guarded):
    sock = _raw(guarded.port)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: a\r\n" % i for i in range(4000)) + b"\r\n")
    assert _answer(sock).startswith(b"HTTP/1.1 431 ")


def test_oh32_twenty_concurrent_creates_of_one_id_make_it_once(embedder, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    with Served(create_app(embedder, conversations_dir=tmp_path / "c")) as s, \
            httpx.Client(timeout=30) as http, ThreadPoolExecutor(20) as pool:
        statuses = sorted(pool.map(lambda _: http.post(s.url + "/v1/conversations", json={"id": "one"}).status_code,
                                   range(20)))
    assert statuses == [200] + [409] * 19


def test_oh33_34_links_planted_in_the_conversations_folder_are_never_written_through(embedder, tmp_path):
    folder = tmp_path / "conversations"
    victim = tmp_path / "victim.txt"
    victim.write_text("precious", encoding="utf-8")
    with Served(create_app(embedder, conversations_dir=folder)) as s:
        HTTP.post(s.url + "/v1/conversations", json={"id": "a"})
        HTTP.post(s.url + "/v1/conversations/a/turns", json={"user": "Why did Ahab hunt the whale?"})
        (folder / "a.json.journal").unlink(missing_ok=True)
        (folder / "a.json.journal").symlink_to(victim)  # OH-33: the next turn would append to it
        r = HTTP.post(s.url + "/v1/conversations/a/turns", json={"user": "And what colour was the whale?"})
        assert r.status_code == 200
        (folder / "b.json").symlink_to(victim)  # OH-34: a "conversation" that is someone's file
        r = HTTP.get(s.url + "/v1/conversations/b")
        assert r.status_code == 500 and "b.json" in r.json()["error"]["message"]
        assert HTTP.delete(s.url + "/v1/conversations/b").status_code == 200
    assert victim.read_text(encoding="utf-8") == "precious"
    assert not (folder / "a.json.journal").is_symlink() and not (folder / "b.json").exists()
    with Served(create_app(embedder, conversations_dir=folder)) as s:
        assert HTTP.get(s.url + "/v1/conversations/a").json()["turns"] == 2


@pytest.mark.parametrize("budget", [-1, 0, "many", True, 1.5])
def test_oh35_a_budget_that_is_not_a_positive_integer_is_422_and_a_huge_one_is_everything(service, budget):
    HTTP.post(service.url + "/v1/conversations", json={"id": "budget"})
    r = HTTP.post(service.url + "/v1/conversations/budget/turns", json={"user": "hi there", "budget_tokens": budget})
    assert r.status_code == 422 and r.json()["error"]["param"] == "budget_tokens"
    huge = HTTP.get(service.url + "/v1/conversations/budget/context", params={"budget_tokens": 10**17})
    whole = HTTP.get(service.url + "/v1/conversations/budget/context")
    assert huge.status_code == 200 and huge.json()["context"] == whole.json()["context"]


def test_oh36_a_connection_that_never_sends_a_byte_is_closed_at_the_head_deadline(guarded):
    sock = _raw(guarded.port)
    answer = _answer(sock)
    assert answer.startswith(b"HTTP/1.1 408 ") and b"the request head did not arrive within 1 s" in answer


# -- several models, token ids and Matryoshka dimensions (issue 56), through the openai client --

@pytest.fixture(scope="module")
def two_models(embedder, tmp_path_factory):
    from model_folders import write_model_folder

    from chunktree import Embedder

    root = tmp_path_factory.mktemp("models")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CHUNKTREE_CACHE_DIR", str(root / "cache"))
        tiny = Embedder(write_model_folder(root / "tiny-matryoshka", "bert", "cls", matryoshka=True))
    with Served(create_app(embedder, others=[tiny])) as s:
        yield s, tiny


def test_several_models_are_served_and_the_request_chooses(two_models, embedder):
    from openai import NotFoundError, OpenAI

    s, tiny = two_models
    client = OpenAI(base_url=s.url + "/v1", api_key="unused")
    listed = {m.id: m.model_extra["chunktree"] for m in client.models.list().data}
    assert listed[embedder.model_id]["default"] and not listed[tiny.model_id]["default"]
    assert listed[tiny.model_id]["pooling"] == "cls" and listed[tiny.model_id]["matryoshka"]
    by_name = client.embeddings.create(model="tiny-matryoshka", input=["the whale"], encoding_format="float")
    assert by_name.model == tiny.model_id and len(by_name.data[0].embedding) == 32
    np.testing.assert_allclose(by_name.data[0].embedding, tiny.embed(["the whale"])[0], atol=1e-5)
    default = client.embeddings.create(model=embedder.model_id, input=["the whale"], encoding_format="float")
    assert len(default.data[0].embedding) == 384
    with pytest.raises(NotFoundError, match="serves 'all-MiniLM-L6-v2', 'tiny-matryoshka'"):
        client.embeddings.create(model="gpt-4", input=["the whale"])
    ordered = HTTP.post(s.url + "/v1/order", json={"texts": SENTENCES, "query": "whale", "model": "tiny-matryoshka"})
    assert ordered.status_code == 200 and ordered.json()["embedding"]["model"] == tiny.model_id


def test_token_ids_embed_as_the_text_they_tokenise_to(two_models, embedder):
    from openai import OpenAI

    s, _ = two_models
    client = OpenAI(base_url=s.url + "/v1", api_key="unused")
    ids = [embedder.tokenizer.encode(t, add_special_tokens=False).ids for t in SENTENCES[:2]]
    reply = client.embeddings.create(model="all-MiniLM-L6-v2", input=ids, encoding_format="float")
    got = np.array([d.embedding for d in reply.data], np.float32)
    np.testing.assert_allclose(got, embedder.embed(SENTENCES[:2]), atol=1e-5)
    assert reply.usage.prompt_tokens == sum(map(len, ids))
    one = client.embeddings.create(model="all-MiniLM-L6-v2", input=ids[0], encoding_format="float")
    np.testing.assert_allclose(one.data[0].embedding, got[0], atol=1e-6)


def test_dimensions_shorten_a_matryoshka_models_vectors_and_no_other(two_models):
    from openai import BadRequestError, OpenAI

    s, tiny = two_models
    client = OpenAI(base_url=s.url + "/v1", api_key="unused")
    short = client.embeddings.create(model="tiny-matryoshka", input=["the whale"], dimensions=8,
                                     encoding_format="float").data[0].embedding
    full = tiny.embed(["the whale"])[0]
    np.testing.assert_allclose(short, full[:8] / np.linalg.norm(full[:8]), atol=1e-5)
    with pytest.raises(BadRequestError, match="does not declare Matryoshka training"):
        client.embeddings.create(model="all-MiniLM-L6-v2", input=["the whale"], dimensions=128)
    with pytest.raises(BadRequestError, match="must be from 1 to 32"):
        client.embeddings.create(model="tiny-matryoshka", input=["the whale"], dimensions=64)


def test_a_server_of_another_model_places_turns_by_the_threshold_rule(two_models, caplog):
    """The shipped decider was fitted on the default model's vectors: a server whose default model is
    another starts, says so, and its conversations place turns by the threshold rule; a decider the
    user names must fit the model's vectors."""
    from chunktree.track.forest import Forest
    from chunktree.track.learned import _warn_thresholds, default_decider

    _, tiny = two_models
    _warn_thresholds.cache_clear()  # said once a process
    with caplog.at_level("WARNING"), Served(create_app(tiny)) as s:
        assert HTTP.post(s.url + "/v1/conversations", json={"id": "c1"}).status_code == 200
        replies = [HTTP.post(s.url + "/v1/conversations/c1/turns", json={"user": u}) for u, _ in DIALOGUE[:3]]
        assert [r.status_code for r in replies] == [200] * 3
        candidates = replies[-1].json()["decision"]["candidates"]
        assert candidates and all(c["probability"] is None for c in candidates)
    assert "with tiny-matryoshka the threshold rule places turns" in caplog.text
    with pytest.raises(ValueError, match="the decider expects 384-dimensional vectors; the embedder makes 32"):
        Forest(tiny, decider=default_decider())


def test_prompt_name_puts_the_models_prompt_before_each_text(embedder, tmp_path_factory):
    from model_folders import write_model_folder
    from openai import BadRequestError, OpenAI

    from chunktree import Embedder

    root = tmp_path_factory.mktemp("prompted")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CHUNKTREE_CACHE_DIR", str(root / "cache"))
        e5 = Embedder(write_model_folder(root / "tiny-e5", prompts={"query": "query: ", "passage": "passage: "}))
    with Served(create_app(embedder, others=[e5])) as s:
        client = OpenAI(base_url=s.url + "/v1", api_key="unused")

        def vector(model, text, **extra):
            return np.array(client.embeddings.create(model=model, input=[text], encoding_format="float",
                                                     extra_body=extra).data[0].embedding)

        np.testing.assert_allclose(vector("tiny-e5", "whales", prompt_name="query"),
                                   e5.embed(["query: whales"])[0], atol=1e-5)
        np.testing.assert_allclose(vector("tiny-e5", "whales", prompt_name="document"),
                                   e5.embed(["passage: whales"])[0], atol=1e-5)
        np.testing.assert_allclose(vector("tiny-e5", "whales"), e5.embed(["whales"])[0], atol=1e-5)
        # a model without prompts: query and document are the text as it is
        np.testing.assert_allclose(vector("all-MiniLM-L6-v2", "whales", prompt_name="query"),
                                   embedder.embed(["whales"])[0], atol=1e-5)
        with pytest.raises(BadRequestError, match=r"'prompt_name' must be one of \['document', 'passage', 'query'\]"):
            vector("tiny-e5", "whales", prompt_name="title")


def test_a_text_repeated_in_one_request_is_embedded_once_and_counted_each_time(embedder):
    """/v1/embeddings with a text given three times: the model embeds it once (the batch-size
    histogram's sum counts the texts the model saw), every copy gets its vector, and usage counts
    the tokens of every text as given."""
    texts = ["Call me Ishmael.", "Call me Ishmael.", "The whale dived.", "Call me Ishmael."]

    def embedded(url):
        return next(float(line.split()[-1]) for line in HTTP.get(url + "/metrics").text.splitlines()
                    if line.startswith("chunktree_batch_size_sum"))

    with Served(create_app(embedder)) as s:
        before = embedded(s.url)
        reply = HTTP.post(s.url + "/v1/embeddings", json={"input": texts, "encoding_format": "float"}).json()
        assert embedded(s.url) - before == 2
    got = np.array([d["embedding"] for d in reply["data"]], dtype=np.float32)
    np.testing.assert_allclose(got, embedder.embed(texts), atol=1e-5)
    assert reply["usage"]["prompt_tokens"] == sum(len(embedder.tokenizer.encode(t, add_special_tokens=False).ids)
                                                  for t in texts)


def test_conversation_turns_use_the_service_cache(embedder, tmp_path):
    """A turn's texts go through the service's embedding cache like every endpoint's: after a turn
    the cache holds them (as the forest embeds them: its query prompt before each text)."""
    from chunktree.engine.cache import EmbeddingCache

    cache_path = tmp_path / "embeddings.sqlite"
    with Served(create_app(embedder, cache=cache_path)) as s:
        assert HTTP.post(s.url + "/v1/conversations", json={"id": "c1"}).status_code == 200
        turn = HTTP.post(s.url + "/v1/conversations/c1/turns", json={"user": "How long should dough rise?"})
        assert turn.status_code == 200, turn.text
    prompt = embedder.prompt("query")
    with EmbeddingCache(cache_path) as cache:
        vectors, found = cache.get(embedder.vectors_id, [prompt + "How long should dough rise?"], embedder.dim)
    assert found.all()
    np.testing.assert_allclose(vectors[0], embedder.embed([prompt + "How long should dough rise?"])[0], atol=1e-5)

"""The service's embedding cache: the first and the second call of ``/v1/order`` and ``/v1/select``
on the same 250 and 1,000 sentences of the sample corpus (other sentences for each case), against a server started with
``--cache FILE`` and one with ``--no-cache`` (the reference), in the same run. Each server is
warmed up first on other sentences, so the first call pays for embedding, not for loading. And
what the cache costs a request it cannot serve: single new sentences on /v1/embeddings, p50 and p99.

    python -m pytest bench/bench_serve_cache.py
"""

import re
import time

import httpx
import pytest
from bench_serve import start_server
from conftest import summary

SIZES = (250, 1_000)
# Each (endpoint, size) reads its own sentences, so that no first call finds another test's texts cached.
FIRST = {("/v1/order", 250): 0, ("/v1/order", 1_000): 250, ("/v1/select", 250): 1_250, ("/v1/select", 1_000): 1_500}


def sentences(n, skip=0):
    from chunktree import sample_documents

    seen = {}
    for doc in sample_documents():
        for s in re.split(r"(?<=[.!?])\s+", " ".join(doc.text.split())):
            if 30 <= len(s) <= 300:
                seen.setdefault(s, None)
    return list(seen)[skip:skip + n]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cache")
    procs = {"cache": start_server("--cache", str(folder / "embeddings.sqlite")), "no_cache": start_server("--no-cache")}
    yield {name: url for name, (_, url) in procs.items()}
    for proc, _ in procs.values():
        proc.terminate()
        proc.wait(30)


def _post(url, path, body):
    t0 = time.perf_counter()
    r = httpx.post(url + path, json=body, timeout=600)
    seconds = time.perf_counter() - t0
    assert r.status_code == 200, r.text
    return seconds, r.json()


@pytest.mark.parametrize("server", ["cache", "no_cache"])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("path", ["/v1/order", "/v1/select"])
def test_first_and_second_call(results, servers, server, n, path):
    url = servers[server]
    extra = {"query": "Why does Ahab hunt the white whale?"} if path == "/v1/order" else {"k": 20}
    _post(url, path, {"texts": sentences(50, skip=5_000), **extra})  # warm-up on other texts
    texts = sentences(n, skip=FIRST[path, n])
    first_s, first = _post(url, path, {"texts": texts, **extra})
    second_s, second = _post(url, path, {"texts": texts, **extra})
    assert second.get("order") == first.get("order") and second.get("clusters") == first.get("clusters")
    results[path][(server, n)] = {"first_s": first_s, "second_s": second_s,
                                  "first_hits": first["embedding"]["cache_hits"],
                                  "second_hits": second["embedding"]["cache_hits"]}


@pytest.mark.parametrize("server", ["cache", "no_cache"])
def test_single_sentence_latency_when_every_text_is_new(results, servers, server):
    """What the cache costs a request it cannot serve: one new sentence at a time (a lookup that
    misses, the model, and a write), against the server without the cache."""
    url = servers[server]
    texts = sentences(300, skip=2_600 if server == "cache" else 2_900)
    client = httpx.Client(timeout=60)
    for text in texts[:20]:  # warm-up
        client.post(url + "/v1/embeddings", json={"input": text})
    seconds = []
    for text in texts[20:]:
        t0 = time.perf_counter()
        r = client.post(url + "/v1/embeddings", json={"input": text})
        seconds.append(time.perf_counter() - t0)
        assert r.status_code == 200
    seconds.sort()
    results["latency"][server] = {"p50": seconds[len(seconds) // 2], "p99": seconds[int(0.99 * len(seconds))]}


@summary
def cache_summary(results):
    lines = []
    for path in ("/v1/order", "/v1/select"):
        for n in SIZES:
            c, ref = results.get(path, {}).get(("cache", n)), results.get(path, {}).get(("no_cache", n))
            if not (c and ref):
                continue
            lines.append(f"{path}, {n:,} texts: with the cache first {c['first_s']:.2f} s, second {c['second_s']:.3f} s "
                         f"({c['second_hits']:,} of {n:,} from the cache; {c['first_s'] / c['second_s']:.1f}x faster); "
                         f"without it {ref['first_s']:.2f} s, {ref['second_s']:.2f} s; second call with / without the "
                         f"cache {c['second_s'] / ref['second_s']:.3f}")
    c, ref = results.get("latency", {}).get("cache"), results.get("latency", {}).get("no_cache")
    if c and ref:
        lines.append(f"/v1/embeddings, one new sentence a request (every lookup misses): p50 {c['p50'] * 1e3:.2f} ms with "
                     f"the cache, {ref['p50'] * 1e3:.2f} ms without ({(c['p50'] - ref['p50']) * 1e3:+.2f} ms); p99 "
                     f"{c['p99'] * 1e3:.2f} / {ref['p99'] * 1e3:.2f} ms")
    return lines

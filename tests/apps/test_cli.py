"""The command line: run as a user runs it (a real subprocess) where the process matters, and
in-process (``main``) for the arguments and outputs."""

import json
import subprocess
import sys

import numpy as np
import pytest
from strict_json import loads


def run(*args, cwd=None):
    """``python -m chunktree ARGS`` in a subprocess."""
    return subprocess.run([sys.executable, "-m", "chunktree", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


@pytest.fixture
def corpus(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "whales.md").write_text("# Whales\n\n" + "The sperm whale dives deep to hunt squid. " * 40,
                                      encoding="utf-8")
    (folder / "ships.txt").write_text("A whaling ship carried boats, harpoons and casks of oil. " * 5,
                                      encoding="utf-8")
    return folder


def test_embed_writes_vectors_and_provenance(tmp_path, cli, corpus, embedder):
    out = tmp_path / "out" / "vecs.npy"
    cache = tmp_path / "cache.sqlite"
    r = run("embed", str(corpus), "-o", str(out), "--cache", str(cache), "--chunk-tokens", "64", "--overlap", "8")
    assert r.returncode == 0, r.stderr
    vectors = np.load(out)
    rows = [loads(line) for line in out.with_suffix(".jsonl").read_text(encoding="utf-8").splitlines()]
    assert vectors.shape == (len(rows), 384) and len(rows) > 5
    assert sorted(p.name for p in out.parent.iterdir()) == ["vecs.jsonl", "vecs.npy"]  # no .partial left
    sources = {row["source"] for row in rows}
    assert sources == {str(corpus / "ships.txt"), str(corpus / "whales.md")}
    for row in rows:
        text = open(row["source"], encoding="utf-8").read()
        assert text[row["start"]:row["end"]] == row["text"]
    assert all(row["heading"] == "Whales" for row in rows if row["source"].endswith(".md"))
    # the same path (auto) in another batching: within its batch invariance (test_backends)
    assert np.sum(vectors * embedder.embed([row["text"] for row in rows]), axis=1).min() >= 0.99999
    assert f"{len(rows)} chunks from 2 source(s)" in r.stdout
    assert f"backend {embedder.backend} {embedder.precision} on {embedder.threads} threads ({embedder.choice.reason})" in r.stdout
    unique = len({row["text"] for row in rows})  # repeated texts are embedded once
    assert unique < len(rows) and f"{unique} embedded, 0 from cache" in r.stdout
    again = cli("embed", str(corpus), "-o", str(out), "--force", "--cache", str(cache), "--chunk-tokens", "64", "--overlap", "8")
    assert f"0 embedded, {len(rows)} from cache" in again.stdout


@pytest.mark.parametrize("args, message", [
    (["embed", "-o", "x.npy"], "give input PATHs or --sample"),
    (["embed", "missing.txt", "-o", "x.npy"], "missing.txt: no such file or folder"),
    (["embed", "--sample", "-o", "x.npy", "--chunk-tokens", "1"], "--chunk-tokens must be > 2"),
    (["embed", "--sample", "-o", "x.npy", "--model", "nope"], "model must be one of"),
    (["embed", "--sample", "-o", "x.npy", "--backend", "onnxruntime", "--precision", "bf16"],
     "precision='bf16' needs backend 'openvino' or 'auto'"),
])
def test_errors_are_one_clear_line(tmp_path, cli, args, message):
    r = cli(*args, cwd=tmp_path)
    assert r.returncode == 2
    assert message in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("command", [["embed", "x", "-o", "x.npy"], ["order", "x"], ["select", "x"], ["read", "x", "-q", "?"],
                                     ["track", "d.jsonl"], ["serve"], ["eval-order", "d.json"], ["eval-track", "d.json"]])
def test_every_command_that_embeds_takes_backend_precision_and_threads(command):
    from chunktree.apps.cli.main import build_parser

    args = build_parser().parse_args([*command, "--backend", "onnxruntime", "--precision", "int8", "--threads", "1"])
    assert (args.backend, args.precision, args.threads) == ("onnxruntime", "int8", 1)


def test_embed_on_a_chosen_backend(tmp_path, cli, corpus):
    from chunktree import Embedder

    out = tmp_path / "v.npy"
    r = cli("embed", corpus, "-o", out, "--no-cache", "--chunk-tokens", "64", "--backend", "onnxruntime", "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert "backend onnxruntime fp32 on 1 threads (asked for onnxruntime fp32)" in r.stdout
    assert "embedded, 0 from cache, onnxruntime fp32)" in r.stdout
    texts = [loads(line)["text"] for line in out.with_suffix(".jsonl").read_text(encoding="utf-8").splitlines()]
    np.testing.assert_allclose(np.load(out), Embedder(backend="onnxruntime").embed(texts), atol=1e-5)


def test_an_output_folder_that_cannot_be_made_fails_before_any_work(tmp_path, cli, monkeypatch):
    (tmp_path / "a-file").write_text("not a folder")

    def no_work(*args, **kwargs):
        raise AssertionError("chunked or embedded before checking the output path")

    monkeypatch.setattr("chunktree.apps.cli.common.load_chunks", no_work)
    r = cli("embed", "--sample", "-o", tmp_path / "a-file" / "out.npy")
    assert r.returncode == 2 and "cannot create the folder" in r.stderr and "a-file" in r.stderr


def test_a_folder_with_html_and_no_html_extractor_is_one_error_line(tmp_path, cli, monkeypatch):
    (tmp_path / "page.html").write_text("<html><body><p>The sperm whale dives deep.</p></body></html>",
                                        encoding="utf-8")
    monkeypatch.setitem(sys.modules, "trafilatura", None)  # as when lxml_html_clean is missing
    r = cli("order", tmp_path, "--no-cache")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and "pip install trafilatura lxml_html_clean" in r.stderr


def test_error_lines_from_a_real_process(tmp_path):
    r = run("order", "missing.txt", cwd=tmp_path)
    assert r.returncode == 2 and "missing.txt: no such file or folder" in r.stderr and "Traceback" not in r.stderr


def test_a_bug_shows_its_traceback(cli, corpus, monkeypatch):
    def broken(*args, **kwargs):
        raise ValueError("a bug, not a user error")

    monkeypatch.setattr("chunktree.engine.order.order", broken)
    with pytest.raises(ValueError, match="a bug, not a user error"):
        cli("order", corpus)


def test_help_lists_commands(cli):
    r = cli("--help")
    assert r.returncode == 0 and all(name in r.stdout for name in ("embed", "order", "select", "read", "serve"))


def test_order_json(tmp_path, cli, corpus, embedder):
    from chunktree.engine.order import order

    r = cli("order", str(corpus), "--query", "How deep does the whale dive?", "--format", "json",
            "--cache", str(tmp_path / "c.sqlite"), "--chunk-tokens", "64", "--overlap", "0")
    assert r.returncode == 0, r.stderr
    doc = loads(r.stdout)
    assert {"order", "root", "method", "tree_weight", "chunks", "params", "timings", "embedding"} <= set(doc)
    assert doc["embedding"]["model"] == embedder.model_id and doc["query"] == "How deep does the whale dive?"
    assert {"chunk_s", "embed_s", "tree_s", "traverse_s", "total_s"} == set(doc["timings"])
    n = doc["n_chunks"]
    assert sorted(doc["order"]) == list(range(n)) and len(doc["chunks"]) == n
    first = doc["chunks"][0]
    assert first["id"] == doc["root"] == doc["order"][0] and first["parent"] is None
    for row in doc["chunks"]:
        assert {"id", "source", "start", "end", "text", "parent", "parent_similarity", "query_similarity"} <= set(row)
        assert open(row["source"], encoding="utf-8").read()[row["start"]:row["end"]] == row["text"]
    texts = [row["text"] for row in sorted(doc["chunks"], key=lambda row: row["id"])]
    want = order(embedder.embed(texts), embedder.embed(["How deep does the whale dive?"])[0])
    assert doc["order"] == want.order.tolist()
    assert doc["tree_weight"] == pytest.approx(want.tree_weight, rel=1e-5)


def test_order_text_summary(tmp_path, cli, corpus):
    r = cli("order", str(corpus), "--strategy", "dfs", "--top", "3", "--cache", str(tmp_path / "c.sqlite"),
            "--chunk-tokens", "64")
    assert r.returncode == 0, r.stderr
    assert "strategy dfs, method exact" in r.stdout and "first 3 of" in r.stdout
    assert "time: chunk" in r.stdout and "from cache" in r.stdout and "   3. #" in r.stdout
    assert "tree parent #" in r.stdout and "after #" not in r.stdout


def test_order_text_without_a_tree_names_no_root(tmp_path, cli, corpus):
    r = cli("order", str(corpus), "--strategy", "dense", "-q", "sperm whale", "--top", "4", "--no-cache",
            "--chunk-tokens", "64")
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if line.lstrip()[:2] in ("1.", "2.", "3.", "4.")]
    links = [row.rsplit("]", 1)[1] for row in rows]  # what follows the provenance
    assert len(rows) == 4 and all("root" not in link and "tree parent" not in link for link in links)
    sims = [float(row.rsplit("query sim ", 1)[1]) for row in rows]
    assert sims == sorted(sims, reverse=True)  # dense: descending query similarity


def test_select_text_summary(tmp_path, cli, corpus):
    r = cli("select", str(corpus), "-k", "2", "--no-cache", "--chunk-tokens", "64")
    assert r.returncode == 0, r.stderr
    assert "-> 2 clusters (k=2), 1 representative(s) each" in r.stdout and "time: chunk" in r.stdout
    assert r.stdout.count("cluster ") >= 2 and "distance " in r.stdout


def test_the_preview_shows_the_text_as_the_page_does_and_json_keeps_it_as_written(tmp_path, cli):
    (tmp_path / "guide.md").write_text("Read [the pooling guide](pool.md) and {func}`attrs.define` before you start.\n",
                                       encoding="utf-8")
    r = cli("select", tmp_path, "-k", "1", "--no-cache")
    assert r.returncode == 0, r.stderr
    assert "Read the pooling guide and `attrs.define` before you start." in r.stdout and "](pool.md)" not in r.stdout
    r = cli("select", tmp_path, "-k", "1", "--no-cache", "--format", "json")
    assert "[the pooling guide](pool.md)" in r.stdout  # the chunk's text as written: its offsets index the file
    (tmp_path / "fixtures.rst").write_text(":orphan:\n\n.. _yield:\n\nYield fixtures\n==============\n\n"
                                           ".. code-block:: python\n\n    yield conn\n\nThe code after *yield* "
                                           "runs at teardown.\n", encoding="utf-8")
    r = cli("order", tmp_path, "--no-cache")
    assert "Yield fixtures yield conn The code after yield runs at teardown." in r.stdout


def test_select_on_three_subjects_with_k_2_hints_at_more_and_coverage_names_the_centre(cli):
    """examples/notes holds three subjects (bread, Kubernetes, Roman water)."""
    r = cli("select", "examples/notes", "-k", "2", "--no-cache")
    assert r.returncode == 0, r.stderr
    assert "cluster #0:" in r.stdout and "cluster #1:" in r.stdout and "count from 0" in r.stdout
    assert "hint: the chunks fall into about 3 groups" in r.stdout and "with -k 2 some clusters hold" in r.stdout
    r = cli("select", "examples/notes", "-k", "3", "--no-cache")
    assert "hint:" not in r.stdout
    r = cli("select", "examples/notes", "-k", "3", "--coverage", "--no-cache")
    reps = [line for line in r.stdout.splitlines() if line.startswith("   #")]
    assert len(reps) == 3 and all(line.endswith("the centre") for line in reps)
    assert "distance 0.000" not in r.stdout


def test_select_json(tmp_path, cli, corpus):
    r = cli("select", str(corpus), "-k", "2", "--per-cluster", "2", "--format", "json",
            "--cache", str(tmp_path / "c.sqlite"), "--chunk-tokens", "64", "--overlap", "0")
    assert r.returncode == 0, r.stderr
    doc = loads(r.stdout)
    assert doc["k"] == 2 and len(doc["clusters"]) == 2
    members = sorted(i for c in doc["clusters"] for i in c["members"])
    assert members == list(range(doc["n_chunks"]))
    for cluster in doc["clusters"]:
        assert len(cluster["representatives"]) == min(2, cluster["size"])
        for rep in cluster["representatives"]:
            assert rep["id"] in cluster["members"]
            assert open(rep["source"], encoding="utf-8").read()[rep["start"]:rep["end"]] == rep["text"]
    ids = [rep["id"] for c in doc["clusters"] for rep in c["representatives"]]
    assert len(set(ids)) == len(ids)
    covering = cli("select", str(corpus), "-k", "2", "--coverage", "--format", "json",
                   "--cache", str(tmp_path / "c.sqlite"), "--chunk-tokens", "64", "--overlap", "0")
    assert covering.returncode == 0, covering.stderr
    doc = loads(covering.stdout)
    assert doc["params"]["coverage"] is True and len(doc["clusters"]) == 2
    assert sorted(i for c in doc["clusters"] for i in c["members"]) == list(range(doc["n_chunks"]))


@pytest.mark.parametrize("args, message", [
    (["-k", "lots"], "-k must be an int or 'elbow'; got 'lots'"),
    (["-k", "0"], "k must be >= 1; got 0"),
    (["-k", "99"], "k must be in [1, n_chunks="),
    ([], "give k"),
])
def test_select_errors(tmp_path, cli, corpus, args, message):
    r = cli("select", str(corpus), *args, "--cache", str(tmp_path / "c.sqlite"))
    assert r.returncode == 2 and message in r.stderr


def test_read_extractive(tmp_path, cli, corpus):
    trace = tmp_path / "trace.jsonl"
    r = cli("read", str(corpus), "--query", "How deep does the whale dive?", "--extractive", "--memory-tokens", "40",
            "--trace", str(trace), "--cache", str(tmp_path / "c.sqlite"), "--chunk-tokens", "64")
    assert r.returncode == 0, r.stderr
    assert "worker steps (extractive reader), 0 failed" in r.stdout and "answer:" in r.stdout
    assert "The sperm whale dives deep" in r.stdout
    steps = [loads(line) for line in trace.read_text().splitlines()]
    assert steps and all(s["memory_tokens"] <= 40 for s in steps)
    doc = loads(cli("read", str(corpus), "--query", "How deep does the whale dive?", "--extractive",
                         "--memory-tokens", "40", "--cache", str(tmp_path / "c.sqlite"), "--chunk-tokens", "64",
                         "--format", "json").stdout)
    assert doc["reader"] == "extractive" and "The sperm whale dives deep" in doc["answer"]
    assert len(doc["steps"]) == len(steps) and doc["params"]["memory_tokens"] == 40


def test_read_with_llm_server(tmp_path, cli, corpus):
    from llm_server import LLMServer

    with LLMServer() as server:
        r = cli("read", str(corpus), "--query", "q", "--llm-base-url", server.base_url, "--model", "memory",
                "--order", "document", "--cache", str(tmp_path / "c.sqlite"), "--chunk-tokens", "64")
    assert r.returncode == 0, r.stderr
    assert "answer:\nANSWER: seen 0," in r.stdout and "0 failed" in r.stdout


def test_read_llm_error_is_one_line(tmp_path, cli, corpus):
    from llm_server import LLMServer

    with LLMServer() as server:
        r = cli("read", str(corpus), "-q", "q", "--llm-base-url", server.base_url, "--model", "400",
                "--cache", str(tmp_path / "c.sqlite"))
    assert r.returncode == 2 and "rejected the request" in r.stderr and "Traceback" not in r.stderr


def test_eval_order_on_a_tiny_squad_file(tmp_path, cli):
    paragraphs = [
        "The harbour of Nantucket was busy. Ships left every week for the Pacific.",
        "Whalers hunted the sperm whale for its oil. The oil lit the lamps of many cities.",
        "Ahab lost his leg to a white whale. He swore revenge on the whale named Moby Dick.",
    ]
    qas = [{"id": "q1", "question": "What did Ahab lose?", "answers": [{"text": "his leg", "answer_start": 10}]},
           {"id": "q2", "question": "What lit the lamps?", "answers": [{"text": "The oil", "answer_start": 44}]}]
    data = {"data": [{"title": "t", "paragraphs": [
        {"context": paragraphs[0], "qas": []}, {"context": paragraphs[1], "qas": [qas[1]]},
        {"context": paragraphs[2], "qas": [qas[0]]}]}]}
    assert paragraphs[2][10:17] == "his leg" and paragraphs[1][44:51] == "The oil"
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(data))
    out = tmp_path / "result.json"
    r = cli("eval-order", str(path), "--budget", "1.0", "--json", str(out), "--cache", str(tmp_path / "c.sqlite"))
    assert r.returncode == 0, r.stderr
    result = loads(out.read_text())
    assert result["summary"]["all"]["questions"] == 2
    orders = result["summary"]["all"]["orders"]
    for m in orders.values():  # the whole article fits the memory: nothing is lost
        assert m["query:answer_held"]["mean"] == m["memory:answer_held"]["mean"] == 1.0
    # document order: gold paragraphs 2 and 1 of 3 sit at positions 1.0 and 0.5
    assert orders["document"]["later_gold"]["mean"] == pytest.approx(0.75)
    assert "| bfs |" in r.stdout and "squad:" in r.stdout
    bad = cli("eval-order", str(path), "--budget", "0")
    assert bad.returncode == 2 and "argument --budget: must be a finite number > 0 and <= 1; got '0'" in bad.stderr
    one = cli("eval-order", str(path), "--limit", "1", "--json", str(out), "--force", "--cache", str(tmp_path / "c.sqlite"),
              "--html", tmp_path / "eval.html")
    assert one.returncode == 0 and loads(out.read_text())["summary"]["all"]["questions"] == 1
    assert "What lit the lamps?" in (tmp_path / "eval.html").read_text(encoding="utf-8")  # the first question


def test_eval_order_names_what_it_leaves_out_and_refuses_a_file_with_nothing_to_evaluate(tmp_path, cli):
    q = {"id": "q", "question": "Who?", "answers": [{"text": "Ahab", "answer_start": 0}]}
    lone = {"title": "one paragraph", "paragraphs": [{"context": "Ahab lost his leg.", "qas": [q]}]}
    pair = {"title": "two", "paragraphs": [{"context": "Ahab lost his leg.", "qas": [q]},
                                           {"context": "Ships left for the Pacific.", "qas": []}]}
    path = tmp_path / "lone.json"
    path.write_text(json.dumps({"data": [lone, lone]}))
    r = cli("eval-order", str(path), "--cache", str(tmp_path / "c.sqlite"))
    assert r.returncode == 2
    assert "nothing to evaluate: each of the 2 passages has fewer than 2 paragraphs or no question" in r.stderr
    path.write_text(json.dumps({"data": [lone, pair]}))
    r = cli("eval-order", str(path), "--cache", str(tmp_path / "c.sqlite"), "--json", str(tmp_path / "r.json"))
    assert r.returncode == 0, r.stderr
    assert "1 passage with fewer than 2 paragraphs or no question left out" in r.stdout
    result = loads((tmp_path / "r.json").read_text())
    assert result["passages_left_out"] == 1 and result["summary"]["all"]["questions"] == 1


def test_serve_answers_an_openai_client(tmp_path, embedder):
    import os
    import socket
    import time

    import httpx
    from openai import OpenAI

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MY_KEY": "k123"}
    proc = subprocess.Popen([sys.executable, "-m", "chunktree", "serve", "--port", str(port), "--api-key-env", "MY_KEY"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k123")
        reply = client.embeddings.create(model="all-MiniLM-L6-v2", input=["Call me Ishmael."])
        np.testing.assert_allclose(reply.data[0].embedding, embedder.embed(["Call me Ishmael."])[0], atol=1e-5)
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert f"on http://127.0.0.1:{port}" in out and "API key required" in out


def test_serve_argument_errors(cli):
    r = cli("serve", "--api-key-env", "CHUNKTREE_SURELY_UNSET_VARIABLE")
    assert r.returncode == 2 and "CHUNKTREE_SURELY_UNSET_VARIABLE" in r.stderr
    r = cli("serve", "--max-batch", "0")
    assert r.returncode == 2 and "argument --max-batch: must be >= 1; got 0" in r.stderr


def test_read_needs_a_reader(tmp_path, cli, corpus, monkeypatch):
    for name in ("CHUNKTREE_LLM_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    r = cli("read", str(corpus), "-q", "q")
    assert r.returncode == 2 and "give --extractive (no LLM) or --llm-base-url" in r.stderr


def test_eval_order_with_an_llm_reader(tmp_path, cli):
    from llm_server import LLMServer

    line = {"question": "Who wrote Moby-Dick?", "answers": ["Herman Melville wrote Moby-Dick"],
            "paragraphs": [{"title": "Ships", "text": "The ship left at dawn.", "supporting": False},
                           {"title": "Author", "text": "Herman Melville wrote Moby-Dick.", "supporting": True}]}
    data = tmp_path / "h.jsonl"
    data.write_text(json.dumps(line) + "\n")
    out = tmp_path / "llm.json"
    with LLMServer() as server:
        r = cli("eval-order", data, "--llm-base-url", server.base_url, "--model", "first-read", "--json", out,
                "--llm-cache", tmp_path / "llm.sqlite", "--cache", tmp_path / "c.sqlite")
    assert r.returncode == 0, r.stderr
    assert "LLM reader first-read" in r.stdout and "| dense | 100.0" in r.stdout
    report = loads(out.read_text())
    assert report["summary"]["all"]["orders"]["dense"]["em"]["mean"] == 1.0
    assert report["tokens"]["calls"] == len(report["orders"]) * 2  # one worker call and the manager per read


def test_track_prints_decisions_the_forest_and_the_context(tmp_path, cli):
    turns = [{"user": "Why did Captain Ahab hunt the white whale Moby Dick across the oceans?", "assistant": "Revenge."},
             {"user": "and what colour was it?", "assistant": "White."},
             {"user": "How long should sourdough bread dough rise before baking in the oven?"},
             {"user": "Which flour gives the crispiest crust for a sourdough loaf?", "conversation": "other"}]
    path = tmp_path / "dialogue.jsonl"
    path.write_text("\n".join(json.dumps(t) for t in turns) + "\n", encoding="utf-8")
    r = cli("track", path, "--budget-tokens", 200, "--no-cache", "--save", tmp_path / "forests", "--decider", "thresholds")
    assert r.returncode == 0, r.stderr
    assert "[default] turn 0: new_topic -> topic 0, a new tree (first turn)" in r.stdout
    assert "[default] turn 1: continue -> topic 0, after #0 (no topic of its own" in r.stdout
    assert "[default] turn 2: new_topic -> topic 1" in r.stdout and "[other] turn 0: new_topic" in r.stdout
    assert "context for the next turn:" in r.stdout and "topic 0 (2 turns)" in r.stdout and "topic 1 (1 turn)\n" in r.stdout
    assert "  #1 [branch 0] and what colour was it?" in r.stdout  # each turn listed by its user text
    assert (tmp_path / "forests" / "default.json").is_file() and (tmp_path / "forests" / "other.json").is_file()
    r = cli("track", path, "--format", "jsonl", "--no-cache", "--decider", "thresholds")
    rows = [loads(line) for line in r.stdout.splitlines()]
    assert [(row["conversation"], row["action"]) for row in rows] == [
        ("default", "new_topic"), ("default", "continue"), ("default", "new_topic"), ("other", "new_topic")]
    # a question about each conversation, not added to it
    r = cli("track", path, "--format", "json", "--no-cache", "--decider", "thresholds", "--query", "What did Ahab hunt?",
            "--budget-tokens", 200)
    default = loads(r.stdout)["conversations"]["default"]
    context = default["context"]
    assert len(default["forest"]["nodes"]) == 3 and "the current turn" not in context["why"]
    assert max(zip(context["relevance"], context["turns"]))[1] == 0  # the whale turn is the most relevant


def test_track_names_a_bad_line_before_any_work(tmp_path, cli):
    path = tmp_path / "d.jsonl"
    path.write_text('{"user": "fine"}\n{"assistant": "no user"}\n', encoding="utf-8")
    r = cli("track", path, "--no-cache")
    assert r.returncode == 2 and f"{path}:2: a turn must be a JSON object with a non-empty 'user' string" in r.stderr


def test_order_from_embeddings_equals_order_from_the_texts(tmp_path, cli, corpus):
    out = tmp_path / "e.npy"
    assert cli("embed", corpus, "-o", out, "--no-cache").returncode == 0
    direct = loads(cli("order", corpus, "--format", "json", "--no-cache", "-q", "sperm whale").stdout)
    r = cli("order", "--embeddings", out, "--format", "json", "--no-cache", "-q", "sperm whale")
    assert r.returncode == 0, r.stderr
    embedded = loads(r.stdout)
    assert embedded["order"] == direct["order"] and embedded["root"] == direct["root"]
    assert [c["text"] for c in embedded["chunks"]] == [c["text"] for c in direct["chunks"]]
    assert embedded["embedding"] is None  # nothing was embedded but the query
    (tmp_path / "short.jsonl").write_text((tmp_path / "e.jsonl").read_text().splitlines()[0] + "\n")
    bad = cli("order", "--embeddings", out, "--chunks", tmp_path / "short.jsonl", "--no-cache")
    assert bad.returncode == 2 and "has 1 chunks" in bad.stderr and "rows but its chunks file" in bad.stderr


def test_order_from_embeddings_prints_text_with_or_without_chunks(tmp_path, cli, corpus):
    out = tmp_path / "e.npy"
    assert cli("embed", corpus, "-o", out, "--no-cache", "--chunk-tokens", "64").returncode == 0
    n = np.load(out).shape[0]
    r = cli("order", "--embeddings", out, "--no-cache", "--top", "3")
    assert r.returncode == 0, r.stderr
    assert f"{n} chunks from 2 source(s)" in r.stdout and "embed 0 s (vectors given)" in r.stdout
    assert "   1. #" in r.stdout and str(corpus) in r.stdout  # provenance from e.jsonl beside e.npy
    # A user's own vectors, no chunks file: rows are named by index, and the order is the same.
    own = tmp_path / "own" / "vectors.npy"
    own.parent.mkdir()
    own.write_bytes(out.read_bytes())
    mine = cli("order", "--embeddings", own, "--no-cache", "--format", "json")
    assert mine.returncode == 0, mine.stderr
    doc = loads(mine.stdout)
    assert doc["order"] == loads(cli("order", "--embeddings", out, "--no-cache", "--format", "json").stdout)["order"]
    assert all(row["source"] is None and row["text"] is None for row in doc["chunks"])
    text = cli("order", "--embeddings", own, "--no-cache", "--top", "2")
    assert text.returncode == 0, text.stderr
    assert f"{n} vectors (no chunks file)" in text.stdout and f"   1. #{doc['root']} root" in text.stdout
    missing = cli("order", "--embeddings", own, "--chunks", tmp_path / "nope.jsonl", "--no-cache")
    assert missing.returncode == 2 and "nope.jsonl: cannot read it" in missing.stderr


def test_order_and_select_write_pictures(tmp_path, cli, corpus):
    cache = str(tmp_path / "c.sqlite")
    r = cli("order", str(corpus), "-q", "What does the whale hunt?", "--format", "json", "--chunk-tokens", "64",
            "--overlap", "0", "--html", tmp_path / "pics" / "tree.html", "--png", tmp_path / "pics" / "tree.png",
            "--cache", cache)
    assert r.returncode == 0, r.stderr
    n = loads(r.stdout)["n_chunks"]
    page = (tmp_path / "pics" / "tree.html").read_text(encoding="utf-8")
    assert "Chow-Liu tree" in page and f"{n:,} chunks" in page and "plotly" in page
    assert (tmp_path / "pics" / "tree.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = cli("select", str(corpus), "-k", "2", "--chunk-tokens", "64", "--overlap", "0", "--html",
            tmp_path / "clusters.html", "--cache", cache)
    assert r.returncode == 0 and "2 clusters of" in (tmp_path / "clusters.html").read_text(encoding="utf-8")


def test_a_picture_path_that_cannot_be_written_fails_before_any_work(tmp_path, cli, monkeypatch, corpus):
    (tmp_path / "a-file").write_text("not a folder")

    def no_work(*args, **kwargs):
        raise AssertionError("chunked or embedded before checking the picture path")

    monkeypatch.setattr("chunktree.apps.cli.common.load_chunks", no_work)
    for command in (["order"], ["select", "-k", "2"]):
        r = cli(*command, str(corpus), "--png", tmp_path / "a-file" / "t.png")
        assert r.returncode == 2 and "--png" in r.stderr and "cannot create the folder" in r.stderr


@pytest.mark.parametrize("conversation", ["/tmp/elsewhere/absolute", "../../escaped", "x/y", "a" * 65, "nul\u0000id",
                                          "", "dot.json"])
def test_track_save_refuses_a_conversation_id_that_is_not_a_file_name(tmp_path, capsys, conversation):
    from chunktree.apps.cli.main import main

    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"user": "How long should dough rise?"}) + "\n"
                    + json.dumps({"user": "And at what temperature?", "conversation": conversation}) + "\n")
    assert main(["track", str(path), "--no-cache", "--save", str(tmp_path / "forests")]) == 2
    assert f"{path}:2: a conversation id is a string of 1-64 letters, digits, '-' or '_'" in capsys.readouterr().err
    assert not (tmp_path / "forests").exists()  # refused before any folder or work
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.jsonl"]


def test_track_refuses_a_conversation_that_is_not_a_string(tmp_path, capsys):
    from chunktree.apps.cli.main import main

    path = tmp_path / "d.jsonl"
    path.write_text('{"user": "a", "conversation": "1"}\n{"user": "b", "conversation": 1}\n')
    assert main(["track", str(path), "--no-cache"]) == 2
    assert f"{path}:2: 'conversation' must be a string" in capsys.readouterr().err


@pytest.mark.parametrize("line, message", [
    ('{"user": "bad \\ud800 text"}', ":3: 'user' is not valid Unicode: a lone surrogate '\\ud800' at character 4"),
    ('{"user": "fine", "assistant": "\\udfff"}', ":3: 'assistant' is not valid Unicode"),
    ("[" * 100_000 + "]" * 100_000, ":3: invalid JSON (JSON nested too deeply to be read)"),
])
def test_track_names_the_line_of_a_text_it_cannot_read_before_any_work(tmp_path, capsys, monkeypatch, line, message):
    from chunktree.apps.cli.main import main

    def no_work(*args, **kwargs):
        raise AssertionError("embedded before checking every line")

    monkeypatch.setattr("chunktree.apps.cli.common.make_embedder", no_work)
    path = tmp_path / "d.jsonl"
    path.write_text('{"user": "How long should dough rise?"}\n{"user": "And how warm?"}\n' + line + "\n")
    assert main(["track", str(path), "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert f"{path}{message}" in err and "Traceback" not in err, err


def test_a_chunks_file_that_is_not_utf8_and_a_non_string_paragraph_are_named(tmp_path, capsys):
    import numpy as np

    from chunktree.apps.cli.main import main

    np.save(tmp_path / "e.npy", np.eye(3, 384, dtype=np.float32))
    (tmp_path / "bad.jsonl").write_bytes(b"\xff\xfe not text")
    assert main(["order", "--embeddings", str(tmp_path / "e.npy"), "--chunks", str(tmp_path / "bad.jsonl")]) == 2
    assert "bad.jsonl: not UTF-8 text (invalid start byte at byte 0" in capsys.readouterr().err
    row = {"question": "q?", "answers": ["a"], "paragraphs": [{"title": "t", "text": 5, "supporting": True}]}
    (tmp_path / "h.jsonl").write_text(json.dumps(row) + "\n")
    assert main(["eval-order", str(tmp_path / "h.jsonl"), "--no-cache"]) == 2
    assert "h.jsonl:1: not a HotpotQA-style line" in capsys.readouterr().err
    (tmp_path / "empty.json").write_text("")
    assert main(["eval-track", str(tmp_path / "empty.json"), "--no-cache"]) == 2
    assert "empty.json: not a CoQA or SQuAD JSON file" in capsys.readouterr().err

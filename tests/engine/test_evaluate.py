"""eval-order's data, readers, metrics and intervals: hand-made cases with known answers."""

import json

import numpy as np
import pytest

from chunktree.engine.evaluate import evaluate_orders, format_report, load
from chunktree.engine.evaluate.data import question_kind
from chunktree.engine.evaluate.stats import bootstrap
from chunktree.engine.read.extractive import ExtractiveWorker, Sentences


def hotpot_line(question, answers, paragraphs, gold):
    return json.dumps({"question": question, "answers": answers,
                       "paragraphs": [{"title": t, "text": x, "supporting": i in gold}
                                      for i, (t, x) in enumerate(paragraphs)]})


PARAGRAPHS = [
    ("Nantucket", "Nantucket is an island. Whaling ships sailed from its harbour."),
    ("Moby-Dick (novel)", "Moby-Dick is a novel by Herman Melville. Its captain is Ahab."),
    ("Lighthouse", "The lighthouse stood on the cliff. Its lamp burned whale oil."),
    ("Herman Melville", "Herman Melville was born in New York City in 1819. He worked on a whaler."),
]


def test_hotpot_lines_load_with_their_kind(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_text("\n".join([
        hotpot_line("Where was the author of Moby-Dick born?", ["New York City"], PARAGRAPHS, {1, 3}),
        hotpot_line("Are Nantucket and Lighthouse both places?", ["yes"], PARAGRAPHS, {0, 2}),
        hotpot_line("Who was older, Herman Melville or the Moby-Dick captain?", ["Melville"], PARAGRAPHS, {1, 3}),
    ]) + "\n")
    fmt, passages = load(path)
    assert fmt == "hotpot" and len(passages) == 3
    assert [p.questions[0].kind for p in passages] == ["bridge", "comparison", "comparison"]
    assert passages[0].questions[0].gold == (1, 3) and passages[0].paragraphs[3].startswith("Herman")


@pytest.mark.parametrize("question, answers, titles, kind", [
    ("Is Paris in France?", ["Yes"], ["Paris", "France"], "comparison"),
    ("Which is older, Yale (university) or Harvard?", ["Harvard"], ["Yale (university)", "Harvard"], "comparison"),
    ("What city hosts the team whose coach is Ann?", ["Boston"], ["Ann Smith", "Boston"], "bridge"),
])
def test_question_kind_rule(question, answers, titles, kind):
    assert question_kind(question, tuple(answers), titles) == kind


def test_bad_lines_name_the_file_and_line(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_text(hotpot_line("q?", ["a"], PARAGRAPHS, {0, 1}) + "\n{\"question\": 3}\n")
    with pytest.raises(ValueError, match=r"h.jsonl:2: not a HotpotQA-style line"):
        load(path)
    squad = tmp_path / "s.json"
    squad.write_text('{"data": [{"paragraphs": [{"qas": []}]}]}')
    with pytest.raises(ValueError, match="not a SQuAD-format file"):
        load(squad)
    with pytest.raises(ValueError, match="format must be one of"):
        load(squad, "csv")


def test_memory_aware_worker_needs_the_first_hop_before_the_second():
    # q along z. s0 (hop 1) is close to q; s1 (hop 2) is far from q but close to s0; s2 and s3 are
    # distractors, closer to q than s1 and far from s0. The memory holds two sentences.
    vectors = np.array([[0.8, 0, 0.6], [0.9798, 0, 0.2], [0, 0.9165, 0.4], [0, -0.893, 0.45]], dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    sentences = Sentences(chunk=np.arange(4), start=np.zeros(4, np.int64), end=np.ones(4, np.int64),
                          tokens=np.ones(4, np.int64), vectors=vectors, indptr=np.arange(5), key=np.arange(4))
    scores = vectors @ np.array([0, 0, 1], np.float32)

    def kept(seq, weight):
        worker = ExtractiveWorker(sentences, scores, 2, ["a", "b", "c", "d"], memory_weight=weight)
        for chunk in seq:
            worker.read(chunk)
        return sorted(worker.kept_sentences())

    # query-only: hop 2 scores lowest, whatever the order
    assert kept([0, 1, 3, 2], 0.0) == kept([1, 3, 2, 0], 0.0) == [0, 3]
    # memory-aware: hop 1 held makes hop 2 recognisable ...
    assert kept([0, 1, 3, 2], 0.5) == [0, 1]
    # ... but hop 2 read first, with nothing in memory to vouch for it, is dropped
    assert kept([1, 3, 2, 0], 0.5) == [0, 3]


def test_evaluate_on_a_tiny_hotpot_set(tmp_path, embedder):
    path = tmp_path / "h.jsonl"
    path.write_text(hotpot_line("Where was the author of Moby-Dick born?", ["New York City"], PARAGRAPHS, {1, 3}))
    _, passages = load(path)
    result = evaluate_orders(passages, embedder, budget=1.0)
    (record,) = result["records"]
    doc = record["orders"]["document"]
    # document order: gold at positions 1 and 3 of 4
    assert doc["positions"] == {"later_gold": 1.0, "gap": 2.0, "adjacent": 0.0, "first3": 0.0}
    for m in record["orders"].values():  # the whole passage fits the memory
        assert m["query"] == m["memory"] == {"gold_all": 1.0, "gold_each": 1.0, "answer_held": 1.0}
    # Whether the gold pair (1, 3) is a Chow-Liu tree edge, by scipy's minimum spanning tree of 2 - similarity.
    from scipy.sparse.csgraph import minimum_spanning_tree

    x = embedder.embed([text for _, text in PARAGRAPHS]).astype(np.float64)
    mst = minimum_spanning_tree(2.0 - x @ x.T).toarray()
    assert record["tree_edge"] == float(mst[1, 3] > 0 or mst[3, 1] > 0)
    summary = result["summary"]["all"]["orders"]
    assert summary["document"]["later_gold"]["mean"] == 1.0 and "later_gold - document" not in summary["document"]
    assert summary["dense"]["later_gold - document"]["mean"] == pytest.approx(summary["dense"]["later_gold"]["mean"] - 1)
    text = format_report(result, "hotpot")
    assert "| guided |" in text and "paired difference" in text


def test_bootstrap_interval():
    assert bootstrap([0.5] * 40) == {"mean": 0.5, "lo": 0.5, "hi": 0.5, "n": 40}
    values = np.random.default_rng(0).random(2000) < 0.3
    ci = bootstrap(values)
    half = 1.96 * np.sqrt(values.mean() * (1 - values.mean()) / values.size)  # normal approximation
    assert ci["lo"] < ci["mean"] < ci["hi"]
    assert (ci["hi"] - ci["lo"]) / 2 == pytest.approx(half, rel=0.15)
    assert bootstrap([])["n"] == 0


def test_scores_follow_the_squad_script():
    from chunktree.engine.evaluate.llm_eval import exact_match, normalize_answer, token_f1

    assert normalize_answer("The  Pequod!") == "pequod"
    assert exact_match("the Pequod.", ("Pequod",)) == 1.0 and exact_match("a ship", ("Pequod",)) == 0.0
    assert token_f1("Captain Ahab of Nantucket", ("Ahab",)) == pytest.approx(0.4)  # P = 1/4, R = 1
    assert token_f1("", ("",)) == 1.0 and token_f1("x", ("y", "x")) == 1.0


def test_llm_evaluation_sees_the_order_and_caches_every_call(tmp_path, embedder):
    from llm_server import LLMServer

    from chunktree.engine.evaluate.llm_eval import CachedChat, evaluate_llm
    from chunktree.engine.read import ChatClient

    paragraphs = [("Ships", "The ship left the harbour at dawn."), ("Lamps", "Oil lamps burned all night."),
                  ("Author", "Herman Melville wrote Moby-Dick.")]
    path = tmp_path / "h.jsonl"
    path.write_text("\n".join(hotpot_line(q, [a], paragraphs, {2}) for q, a in [
        ("Who wrote Moby-Dick?", "Herman Melville wrote Moby-Dick"),
        ("Who wrote the novel Moby-Dick?", "Herman Melville wrote Moby-Dick")]))
    _, passages = load(path)
    with LLMServer() as server:
        def run():
            llm = CachedChat(ChatClient(server.base_url, "first-read", backoff=0), tmp_path / "llm.sqlite")
            return evaluate_llm(passages, embedder, llm, orders=("document", "dense"), concurrency=2)

        first = run()
        calls = len(server.requests)
        again = run()
        assert len(server.requests) == calls  # the rerun came from the cache
        assert server.max_in_flight <= 2
    # The fake reader answers with the first chunk it read: dense reads the gold paragraph first.
    orders = first["summary"]["all"]["orders"]
    assert orders["dense"]["em"]["mean"] == 1.0 and orders["document"]["em"]["mean"] == 0.0
    assert orders["dense"]["em - document"]["mean"] == 1.0
    assert first["tokens"]["calls"] == calls and first["tokens"]["cached"] == 0
    assert first["tokens"]["prompt_tokens"] == 10 * calls  # as the server reports them
    assert again["tokens"]["cached"] == again["tokens"]["calls"] == calls
    assert again["summary"] == first["summary"]

"""The LoCoMo reader and the evidence-recall evaluation on a small conversation written here in
LoCoMo's format (the real LoCoMo data is CC BY-NC: only the real_data test reads it, from
../shared, and it is never copied into the repository)."""

import json

import pytest

from chunktree.checks import InvalidValueError
from chunktree.track.data import is_locomo
from chunktree.track.locomo import KINDS, evaluate_locomo, format_locomo, fused, load_locomo, together

SESSIONS = {
    "session_1": [("Ana", "Hi Ben! I started a pottery class on Tuesdays, my first bowl came out lopsided."),
                  ("Ben", "Ha, that is how it starts. Did the teacher help you fix it?"),
                  ("Ana", "She showed me how to centre the clay on the wheel before pulling the walls."),
                  ("Ben", "Nice. I am planning a trip to Sweden in August to see my grandmother in Uppsala."),
                  ("Ana", "Uppsala is lovely, visit the old cathedral and the botanical garden.")],
    "session_2": [("Ben", "We adopted a dog! He is a beagle called Max and he chews everything."),
                  ("Ana", "A beagle, how fun. Are you training him with treats?"),
                  ("Ben", "Yes, and he already sits on command. The trip to Sweden is booked too."),
                  ("Ana", "My pottery teacher says my bowls are finally even, I glazed three of them blue.")],
}


def write_locomo(path, nested=False):
    conversation = {"speaker_a": "Ana", "speaker_b": "Ben", "session_1_date_time": "1 May 2023",
                    "session_2_date_time": "9 May 2023"}
    for key, utterances in SESSIONS.items():
        n = key.split("_")[1]
        conversation[key] = [{"speaker": s, "dia_id": f"D{n}:{i + 1}", "text": t} for i, (s, t) in enumerate(utterances)]
    conversation["session_2"][0]["blip_caption"] = "a photo of a beagle puppy on a sofa"
    qa = [{"question": "What dog did Ben adopt?", "answer": "a beagle called Max", "evidence": ["D2:1"], "category": 4},
          {"question": "How did Ana's pottery improve?", "answer": "centring the clay; even bowls",
           "evidence": ["D1:3; D2:4"], "category": 1},
          {"question": "Where is Ben going in August?", "answer": "Sweden", "evidence": ["D1:4", "D9:9"], "category": 2},
          {"question": "What colour is Ben's car?", "answer": "no answer", "evidence": [], "category": 5},
          {"question": "Who did Ana meet at the gym?", "answer": "?", "evidence": ["D7:1"], "category": 3}]
    record = {"conversation": conversation, "qa": qa, "sample_id": "demo"} if nested else \
        {**conversation, "qa": qa, "conversation_id": "demo"}
    path.write_text(json.dumps([record]))
    return path


def test_a_locomo_file_is_read_as_turns_sittings_and_questions(tmp_path):
    flat, nested = load_locomo(write_locomo(tmp_path / "flat.json")), load_locomo(write_locomo(tmp_path / "n.json", True))
    assert flat == nested and len(flat) == 1 and is_locomo(json.loads((tmp_path / "flat.json").read_text()))
    c = flat[0]
    assert c.id == "demo" and len(c.turns) == 9 and c.sittings == [1] * 5 + [2] * 4
    assert c.turns[0] == "Ana: " + SESSIONS["session_1"][0][1]
    assert c.turns[5].endswith("[shares a photo of a photo of a beagle puppy on a sofa]")
    assert [(q.kind, q.evidence) for q in c.questions] == [("single-hop", (5,)), ("multi-hop", (2, 8)), ("temporal", (3,))]
    assert c.unresolved == 1  # "Who did Ana meet at the gym?": D7:1 names no utterance; the adversarial one is left out
    assert set(KINDS.values()) >= {q.kind for q in c.questions}


@pytest.mark.parametrize("content, message", [
    ("[]", "not a LoCoMo file"),
    ('[{"qa": [], "session_1": "hello"}]', "session_1 must be a list of utterances"),
    ('[{"qa": [{"question": 3}], "session_1": []}]', r"qa\[0\] needs a 'question' string"),
    ('[{"qa": [], "session_1": [{"speaker": "A", "text": "hi"}]}]', r"session_1\[0\] needs 'speaker', 'dia_id'"),
    ('[{"qa": [{"question": "q", "category": 9}], "session_1": []}]', r"qa\[0\]: category 9 is none of \[1, 2, 3, 4\]"),
])
def test_a_malformed_locomo_file_is_named(tmp_path, content, message):
    (tmp_path / "bad.json").write_text(content)
    with pytest.raises(InvalidValueError, match=message):
        load_locomo(tmp_path / "bad.json")


def test_reciprocal_rank_fusion():
    import numpy as np

    # item 1: 1/61 + 1/62 (first and second); item 0: 1/64 + 1/61; item 2: 1/62 + 1/64; item 3: 2/63
    assert fused(np.array([1, 2, 3, 0]), np.array([0, 1, 3, 2])).tolist() == [1, 0, 2, 3]


def test_evidence_together_counts_pairs_from_different_sittings(tmp_path):
    """One pair of evidence from different sittings here: the pottery question's D1:3 and D2:4
    (turns 2 and 8); the other questions' evidence lies in one sitting or names no utterance."""
    import numpy as np

    conversation = load_locomo(write_locomo(tmp_path / "locomo.json"))[0]
    by_subject = together(np.array([0, 0, 0, 1, 1, 2, 2, 1, 0]), conversation)  # pottery, Sweden, the dog
    assert by_subject["evidence_pairs"] == 1 and by_subject["evidence_together"] == 1.0
    assert by_subject["chance_together"] == pytest.approx((4 ** 2 + 3 ** 2 + 2 ** 2) / 9 ** 2)  # groups of 4, 3 and 2 turns
    by_sitting = together(np.array(conversation.sittings) - 1, conversation)
    assert by_sitting["evidence_together"] == 0.0 and by_sitting["chance_together"] == pytest.approx((5 ** 2 + 4 ** 2) / 9 ** 2)


def test_evidence_recall_of_every_method_within_each_budget(embedder, tmp_path):
    conversations = load_locomo(write_locomo(tmp_path / "demo.json"))
    tokens = embedder.count_tokens(conversations[0].turns)
    report = evaluate_locomo(conversations, embedder=embedder, budgets=(40, 1000))
    assert report["questions"] == 3 and report["unresolved"] == 1
    everything = report["all"]
    for method in ("forest", "forest_query", "dense", "bm25", "hybrid", "last_n"):
        assert everything[method][1000]["mean"] == 1.0  # the whole conversation fits: every piece of evidence
    # 40 tokens hold the dog question's one evidence turn and nothing more, for the methods that rank it first
    dog = report["by_kind"]["single-hop"]
    assert tokens[5] <= 40 < tokens[5] + min(tokens)
    assert dog["bm25"][40]["mean"] == dog["dense"][40]["mean"] == dog["forest_query"][40]["mean"] == 1.0
    assert dog["last_n"][40]["mean"] == 0.0  # the newest turns are of pottery and Sweden
    assert report["shape"]["demo"]["trees"] >= 1
    text = format_locomo(report, kind_budget=40)
    assert "| 1,000 |" in text and "means only" in text and "| single-hop | 1 |" in text


def test_cli_eval_track_reads_locomo_and_refuses_a_file_that_is_not(cli, tmp_path):
    path = write_locomo(tmp_path / "demo.json")
    run = cli("eval-track", path, "--budgets", "64", "1024", "--no-cache")
    assert run.returncode == 0, run.stderr
    assert "3 questions (1 left out" in run.stdout and "| 1,024 |" in run.stdout and "dense + BM25 (RRF)" in run.stdout
    (tmp_path / "other.json").write_text('[{"utterances": ["a"], "segments": [1]}]')
    run = cli("eval-track", tmp_path / "other.json", "--data", "locomo", "--no-cache")
    assert run.returncode != 0 and "not a LoCoMo file" in run.stderr


@pytest.mark.real_data
def test_on_a_real_locomo_conversation_the_forest_holds_more_evidence_than_hybrid_retrieval(embedder, shared_data):
    """The first conversation of the LoCoMo half in ../shared (CC BY-NC: read there, never copied):
    at 1,024 tokens the forest, asked as a turn and with a query, holds more of the evidence than
    dense + BM25 retrieval fused by reciprocal rank, the independent baseline."""
    from chunktree.track.locomo import evaluate_conversation

    path = shared_data / "dialogue" / "locomo_half.json"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    conversation = load_locomo(path)[0]
    recall = evaluate_conversation(conversation, embedder, None, (1024,))["recall"]
    hybrid = sum(recall["hybrid"][1024])
    assert sum(recall["forest"][1024]) > hybrid and sum(recall["forest_query"][1024]) > hybrid

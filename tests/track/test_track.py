"""The topic forest: the threshold rule's decisions on real embeddings, the context and its budget,
saving and loading, the LLM judge over a real loopback server, and the evaluation's metrics against
hand-made cases (the learned decider: test_learned)."""

import json

import numpy as np
import pytest

from chunktree.track import Forest, ForestFileError, Thresholds
from chunktree.track.decide import content_words
from chunktree.track.evaluate import Turn, _segmentation_errors, score_dialogue, stitch

WHALES = [("Why did Captain Ahab hunt the white whale Moby Dick across the oceans?", "Revenge for his lost leg."),
          ("How did the harpooners on the Pequod throw their harpoons at sperm whales?", "From the whaleboats."),
          ("and what colour was it?", "White.")]
BREAD = [("How long should sourdough bread dough rise before baking in the oven?", "About twelve hours."),
         ("Which flour gives the crispiest crust for a sourdough loaf?", "Strong bread flour.")]
BACK = ("Did Ahab's hatred of the white whale Moby Dick doom the Pequod's whaling crew?", "Yes, all but Ishmael.")


@pytest.fixture
def forest(embedder):
    f = Forest(embedder, decider="thresholds")
    decisions = [f.add(u, a) for u, a in WHALES + BREAD + [BACK]]
    return f, decisions


def test_topics_continue_switch_and_return(forest):
    _f, d = forest
    assert [x.action for x in d] == ["new_topic", "continue", "continue", "new_topic", "continue", "switch"]
    assert [x.tree for x in d] == [0, 0, 0, 1, 1, 0]
    assert d[2].rule == "no topic of its own" and d[2].content_words <= 1  # "and what colour was it?"
    assert d[5].parent == 2  # resumed where the whale topic was left
    best = d[5].candidates[0]
    assert best.tree == 0 and best.fit == max(c.fit for c in d[5].candidates)
    assert all(isinstance(x.to_dict()["thresholds"]["new_topic"], float) for x in d)


def test_same_input_same_decisions(embedder, forest):
    _f, d = forest
    again = Forest(embedder, decider="thresholds")
    assert [again.add(u, a).to_dict() for u, a in WHALES + BREAD + [BACK]] == [x.to_dict() for x in d]


def test_context_is_the_path_verbatim_plus_one_line_per_other_topic(embedder, forest):
    f, _ = forest
    c = f.context()
    system, *turns = c.messages
    assert system["role"] == "system" and system["content"].count("\n- topic 1:") == 1
    assert [m["content"] for m in turns] == [t for pair in WHALES + [BACK] for t in pair]
    assert c.turns == [0, 1, 2, 5] and not c.cut
    count = sum(len(embedder.tokenizer.encode(m["content"], add_special_tokens=False).ids) for m in c.messages)
    assert c.tokens == count


def test_the_budget_keeps_the_newest_turns(embedder, forest):
    f, _ = forest
    whole = f.context()
    for budget in (whole.tokens - 1, 60, 30):
        c = f.context(budget_tokens=budget)
        assert c.cut and c.tokens <= budget
        kept = [m["content"] for m in c.messages if m["role"] != "system"]
        full = [m["content"] for m in whole.messages if m["role"] != "system"]
        assert kept == full[len(full) - len(kept):]  # a suffix: the newest turns
    with pytest.raises(ValueError, match="budget_tokens must be"):
        f.context(budget_tokens=0)


def test_save_and_load_round_trip_and_go_on_alike(embedder, forest, tmp_path):
    f, _ = forest
    f.save(tmp_path / "f.json")
    g = Forest.load(tmp_path / "f.json", embedder, decider="thresholds")
    assert g.show() == f.show() and g.context() == f.context()
    turn = ("What bread goes best with a hearty soup?", None)
    assert g.add(*turn).to_dict() == f.add(*turn).to_dict()


@pytest.mark.parametrize("content, message", [
    (b"{not json", "not a readable forest file"),
    (b'{"format": "other"}', "not a chunktree-forest document"),
    (b'{"format": "chunktree-forest", "version": 99}', "format version 99; this chunktree reads version 1"),
])
def test_a_bad_forest_file_is_named(embedder, tmp_path, content, message):
    (tmp_path / "bad.json").write_bytes(content)
    with pytest.raises(ForestFileError, match=message) as info:
        Forest.load(tmp_path / "bad.json", embedder)
    assert "bad.json" in str(info.value)


def test_a_forest_from_another_model_or_damaged_is_refused(embedder, forest, tmp_path):
    f, _ = forest
    data = f.to_dict()
    (tmp_path / "m.json").write_text(json.dumps({**data, "model": "other@sha256:0"}))
    with pytest.raises(ForestFileError, match=r"m.json: its vectors come from the model 'other@sha256:0'"):
        Forest.load(tmp_path / "m.json", embedder)
    (tmp_path / "v.json").write_text(json.dumps({**data, "vectors": data["vectors"][:40]}))
    with pytest.raises(ForestFileError, match=r"v.json: damaged forest data"):
        Forest.load(tmp_path / "v.json", embedder)


def test_the_llm_judge_is_asked_when_uncertain_and_its_failure_falls_back(embedder):
    from llm_server import LLMServer

    from chunktree.engine.read import ChatClient

    always = Thresholds(uncertain=2.0)  # every decision counts as uncertain
    with LLMServer() as server:
        judged = Forest(embedder, thresholds=always, llm=ChatClient(server.base_url, "judge-new"), decider="thresholds")
        d = [judged.add(u, a) for u, a in WHALES[:2]]
        assert d[0].llm is None  # the first turn needs no judge
        assert d[1].llm["used"] and d[1].action == "new_topic" and d[1].rule == "the LLM judged it a new topic"
        failing = Forest(embedder, thresholds=always, llm=ChatClient(server.base_url, "malformed"), decider="thresholds")
        d = [failing.add(u, a) for u, a in WHALES[:2]]
        assert not d[1].llm["used"] and "no JSON object" in d[1].llm["fallback"]
        assert d[1].action == "continue"  # the embedding decision stands
        calm = Forest(embedder, llm=ChatClient(server.base_url, "judge-new"), decider="thresholds")
        calm.add(*WHALES[0])
        asked_before = len(server.requests)
        calm.add(*BREAD[0])  # a clear new topic: far from every threshold, no LLM call
        assert len(server.requests) == asked_before


def test_content_words():
    assert content_words("and what colour was it?") == 1
    assert content_words("Who created him?") == 1
    assert content_words("Why did Captain Ahab hunt the whale?") == 4


def test_stitched_dialogues_interleave_and_keep_each_story_in_order():
    stories = [[(f"s{s} q{i}", f"a{i}") for i in range(12)] for s in range(20)]
    for seed in range(5):
        turns = stitch(stories, 60, seed)
        assert len(turns) == 60
        for s in {t.story for t in turns}:
            asked = [int(t.user.split("q")[1]) for t in turns if t.story == s]
            assert asked == list(range(len(asked)))  # a story resumes where it was left
        changes = [i for i in range(1, 60) if turns[i].story != turns[i - 1].story]
        stretches = np.diff([0, *changes, 60])
        assert stretches.max() <= 6  # consecutive stretches are of different stories: each is one stretch
        assert any(turns[i].story in {t.story for t in turns[:i]} for i in changes)  # returns happen


def test_metrics_on_hand_made_segmentations():
    turns = [Turn("q", "a", s) for s in [0, 0, 0, 1, 1, 0, 0, 2, 2, 1]]
    v = np.eye(10, dtype=np.float32)
    tokens = np.ones(10, dtype=np.int64)
    perfect = score_dialogue(turns, [0, 0, 0, 1, 1, 0, 0, 2, 2, 1], [([], 1)] * 10, v, tokens)
    assert perfect["boundary_f1"] == 1.0 and perfect["pk"] == 0 and perfect["windowdiff"] == 0
    assert perfect["return_accuracy"] == 1.0 and perfect["assignment"] == 1.0
    one_tree = score_dialogue(turns, [0] * 10, [([], 1)] * 10, v, tokens)
    assert one_tree["boundary_recall"] == 0 and one_tree["return_accuracy"] == 1.0
    assert one_tree["assignment"] == 0.5  # the one tree maps to story 0, which holds 5 of the 10 turns
    # By hand: segments start at turns 3, 5, 7 and 9; with k = 1 the 9 neighbouring pairs are
    # compared, and a prediction of no boundary at all gets the 4 pairs that straddle one wrong.
    gold = np.array([0, 0, 0, 1, 0, 1, 0, 1, 0, 1])
    assert _segmentation_errors(gold, np.zeros(10, int), 1) == (4 / 9, 4 / 9)
    assert _segmentation_errors(gold, gold, 1) == (0.0, 0.0)


def test_an_llm_summariser_and_its_fallback(embedder):
    from llm_server import LLMServer

    from chunktree.engine.read import ChatClient
    from chunktree.track import LLMSummariser

    with LLMServer() as server:
        f = Forest(embedder, summariser=LLMSummariser(ChatClient(server.base_url, "summary")))
        f.add(*WHALES[0])
        assert f.nodes[0].summary == "Summary of: " + WHALES[0][0][:20].strip()
        failing = Forest(embedder, summariser=LLMSummariser(ChatClient(server.base_url, "400")))
        failing.add(*WHALES[0])
        plain = Forest(embedder)
        plain.add(*WHALES[0])
        assert failing.nodes[0].summary == plain.nodes[0].summary  # the extractive one
        assert len(failing.summary_fallbacks) == 1 and "turn 0: LLMError" in failing.summary_fallbacks[0]

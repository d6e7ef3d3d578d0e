"""The topic forest: the threshold rule's decisions on real embeddings, the context and its budget,
saving and loading, the LLM judge over a real loopback server, and the evaluation's metrics against
hand-made cases (the learned decider: test_learned)."""

import json
from pathlib import Path

import numpy as np
import pytest

from chunktree.track import Forest, ForestFileError, Thresholds
from chunktree.track.data import Turn, stitch
from chunktree.track.decide import content_words
from chunktree.track.evaluate import _segmentation_errors, score_dialogue, stitched_dialogues

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


def _tokens_of(embedder, c):
    return sum(len(embedder.tokenizer.encode(m["content"], add_special_tokens=False).ids) for m in c.messages)


def test_context_holds_the_relevant_turns_verbatim_plus_one_line_per_other_topic(embedder, forest, monkeypatch):
    from chunktree.track import context
    from chunktree.track.context import RELEVANCE_KEEP

    monkeypatch.setattr(context, "RELEVANCE_FLOOR", 0.0)  # room for every turn holds every turn
    f, _ = forest
    c = f.context()
    system, *turns = c.messages
    assert system["role"] == "system" and system["content"].count("\n- topic 1:") == 1
    assert [m["content"] for m in turns] == [t for n in c.turns for t in (f.nodes[n].user, f.nodes[n].assistant)]
    assert c.turns == sorted(c.turns) and 5 in c.turns and not c.cut  # the current turn: the whale return
    assert c.why[c.turns.index(5)] == "the current turn" and c.relevance[c.turns.index(5)] == 1.0
    assert c.tokens == _tokens_of(embedder, c)
    # with room for every turn, each comes with its relevance; without a budget, those at least
    # RELEVANCE_KEEP relevant are held, and the whale turns are more relevant than the bread ones
    everything = f.context(budget_tokens=10_000)
    assert everything.turns == [0, 1, 2, 3, 4, 5] and not everything.cut
    p = dict(zip(everything.turns, everything.relevance))
    assert c.turns == [n for n in everything.turns if n == 5 or p[n] >= RELEVANCE_KEEP]
    assert min(p[0], p[1]) > max(p[3], p[4])
    assert all(w.startswith("relevance ") for n, w in zip(everything.turns, everything.why) if n != 5)


def test_under_a_budget_the_current_turn_then_the_most_relevant_that_fit(embedder, forest, monkeypatch):
    from chunktree.track import context

    monkeypatch.setattr(context, "RELEVANCE_FLOOR", 0.0)  # the floor: test_lexical
    f, _ = forest
    everything = f.context(budget_tokens=10_000)
    p = dict(zip(everything.turns, everything.relevance))
    for budget in (everything.tokens - 1, 80, 60, 40, 30, 20):
        c = f.context(budget_tokens=budget)
        assert c.tokens <= budget and c.tokens == _tokens_of(embedder, c)
        if not c.turns:  # the current turn alone is larger than the budget
            assert f._tokens[5] > budget
            continue
        assert 5 in c.turns  # the current turn first
        # every turn left out did not fit after the current turn and the more relevant turns held
        for left in set(range(6)) - set(c.turns):
            before = sum(f._tokens[n] for n in c.turns if n == 5 or p[n] > p[left])
            assert before + f._tokens[left] > budget, (budget, left)
        texts = [m["content"] for m in c.messages if m["role"] != "system"]
        assert texts == [t for n in c.turns for t in (f.nodes[n].user, f.nodes[n].assistant) if t]  # in order
    with pytest.raises(ValueError, match="budget_tokens must be"):
        f.context(budget_tokens=0)


def test_a_topic_split_over_two_trees_is_taken_whole_before_newer_turns_of_others(embedder):
    f = Forest(embedder, decider="thresholds")
    a, b = np.zeros(embedder.dim, np.float32), np.zeros(embedder.dim, np.float32)
    a[0], b[1] = 1.0, 1.0
    for i in range(4):  # topic A in tree 0
        f.force(f"turn {i} of this chat", "a reply", a, 0 if i else None)
    for i in range(4, 8):  # topic B in tree 1
        f.force(f"turn {i} of this chat", "a reply", b, 1 if i > 4 else None)
    f.force("turn 8 of this chat", "a reply", a, None)  # A again, but in a tree of its own
    assert [n.tree for n in f.nodes] == [0] * 4 + [1] * 4 + [2]
    one_turn = f._tokens[0]
    c = f.context(budget_tokens=5 * one_turn)  # room for five turns of equal length
    assert c.turns == [0, 1, 2, 3, 8]  # A's first tree, not B's newer turns
    assert all("similarity 1.00" in w and "this topic" not in w for n, w in zip(c.turns, c.why) if n != 8)


def test_a_follow_up_that_shares_no_words_keeps_the_stretch_it_follows(embedder):
    # examples/dialogue.jsonl: bread, Kubernetes, Roman water, back to bread (turn 9), then "And how
    # many stretch and folds?" (turn 10), which shares no word with turn 9 or with the earlier bread
    lines = (Path(__file__).resolve().parents[2] / "examples" / "dialogue.jsonl").read_text().splitlines()
    f = Forest(embedder)  # the shipped decider
    for turn in map(json.loads, lines[:11]):
        f.add(turn["user"], turn.get("assistant"))
    assert [n.tree for n in f.nodes] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 0, 0]
    c = f.context(budget_tokens=10_000)
    p = dict(zip(c.turns, c.relevance))
    # the earlier bread before Kubernetes (a turn below the relevance floor is not in the context at all)
    assert min(p[n] for n in (0, 1, 2)) > max(p.get(n, 0.0) for n in (3, 4, 5))
    assert p[9] > max(p.get(n, 0.0) for n in range(9))  # the turn it follows first
    # its path: 9, then where bread was left (2) and the bread turns before it
    assert "the turn it follows" in c.why[c.turns.index(9)] and "on its path (4 back)" in c.why[c.turns.index(0)]
    tight = f.context(budget_tokens=f._tokens[10] + f._tokens[9])
    assert tight.turns == [9, 10]  # room for one more: the turn it follows, not the newest (Rome, turn 8)


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
    with pytest.raises(ForestFileError, match=r"v.json: vectors: 30 bytes; 6 nodes of 384 float32 need 9216"):
        Forest.load(tmp_path / "v.json", embedder)


def _vectors(data, change):
    import base64

    v = np.frombuffer(base64.b64decode(data["vectors"]), "<f4").reshape(len(data["nodes"]), -1).copy()
    change(v)
    return base64.b64encode(v.astype("<f4").tobytes()).decode()


def _edit(data, path, value):
    import copy

    data = copy.deepcopy(data)
    *keys, last = path
    target = data
    for k in keys:
        target = target[k]
    if value is _DELETE:
        del target[last]
    else:
        target[last] = value
    return data


_DELETE = object()


@pytest.mark.parametrize("path, value, message", [
    (("nodes", 5, "parent"), 5, r"nodes\[5\].parent: 5 must be an earlier node of the same tree"),  # a loop
    (("nodes", 1, "parent"), -1, r"nodes\[1\].parent: -1 must be an earlier node"),
    (("nodes", 0, "parent"), 1, r"nodes\[0\].parent: 1 must be an earlier node"),  # a two-node cycle with 1 -> 0
    (("nodes", 3, "parent"), 2, r"nodes\[3\].parent: 2 must be an earlier node of the same tree"),
    (("nodes", 2, "children"), [7], r"nodes\[2\].children: \[7\]; the nodes whose parent it is are \[5\]"),
    (("nodes", 4, "id"), 9, r"nodes\[4\].id: 9 must be 4"),
    (("nodes", 4, "tree"), 7, r"nodes\[4\].tree: 7 must be a tree id below 2"),
    (("nodes", 4, "user"), 3, r"nodes\[4\].user: 3 must be a string of valid Unicode"),
    (("nodes", 2, "assistant"), "bad \ud800", r"nodes\[2\].assistant: 'bad \\ud800' must be a string of valid Unicode"),
    (("nodes", 4, "summary"), _DELETE, r"nodes\[4\]: not a node"),
    (("trees", 0, "anchor"), 99, r"trees\[0\].anchor: 99 is not one of its nodes"),
    (("trees", 1, "nodes"), [3], r"trees\[1\].nodes: \[3\]; the nodes of tree 1 are \[3, 4\]"),
    (("current",), "5", r"current: '5' must be a node id below 6"),
    (("current",), 6, r"current: 6 must be a node id below 6"),
    (("thresholds",), _DELETE, r"thresholds: missing or not a dict"),
    (("thresholds", "new_topic"), "high", r"thresholds: new_topic must be"),
    (("model",), _DELETE, r"model: missing or not a str"),
    (("vectors",), "###", r"vectors: not base64"),
])
def test_a_forest_file_with_bad_contents_is_refused_naming_the_field(embedder, forest, tmp_path, path, value, message):
    f, _ = forest
    (tmp_path / "bad.json").write_text(json.dumps(_edit(f.to_dict(), path, value)))
    with pytest.raises(ForestFileError, match="bad.json: " + message):
        Forest.load(tmp_path / "bad.json", embedder)


def test_a_forest_file_nested_past_the_parser_is_refused(embedder, tmp_path):
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ForestFileError, match=r"deep\.json: not a readable forest file \(ValueError: JSON nested too deeply"):
        Forest.load(tmp_path / "deep.json", embedder)


def test_a_huge_forest_file_is_refused_with_a_short_message(embedder, forest, tmp_path):
    import json

    f, _ = forest
    f.save(tmp_path / "big.json")
    data = json.loads((tmp_path / "big.json").read_text(encoding="utf-8"))
    node = data["nodes"][1]
    data["nodes"] = [dict(node, id=i, parent=None, children=[]) for i in range(50_000)]  # trees do not list them
    (tmp_path / "big.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ForestFileError, match=r"big\.json: ") as info:
        Forest.load(tmp_path / "big.json", embedder)
    assert len(str(info.value)) < 400  # the 50,000 ids are not echoed


@pytest.mark.parametrize("change, message", [
    (lambda v: v.__setitem__((2, 0), np.nan), r"vectors\[2\]: not a finite unit vector \(norm nan\)"),
    (lambda v: v.__setitem__(3, 0.0), r"vectors\[3\]: not a finite unit vector \(norm 0\)"),
    (lambda v: v.__setitem__(1, v[1] * 3), r"vectors\[1\]: not a finite unit vector \(norm 3\)"),
])
def test_a_forest_file_with_bad_vectors_is_refused(embedder, forest, tmp_path, change, message):
    f, _ = forest
    data = f.to_dict()
    (tmp_path / "bad.json").write_text(json.dumps({**data, "vectors": _vectors(data, change)}))
    with pytest.raises(ForestFileError, match=message):
        Forest.load(tmp_path / "bad.json", embedder)


def test_saving_onto_a_folder_fails_and_leaves_nothing(embedder, forest, tmp_path):
    f, _ = forest
    (tmp_path / "f.json").mkdir()
    with pytest.raises(IsADirectoryError):
        f.save(tmp_path / "f.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.json"]  # no stray temporary file


def test_a_budget_counts_each_line_once_however_many_topics(embedder):
    f = Forest(embedder, decider="thresholds")
    for i in range(300):  # orthogonal turns: 300 topics
        v = np.zeros(embedder.dim, np.float32)
        v[i] = 1.0
        f._place(f"an entirely distinct subject, number {i}", "a reply about it", v, v)
    calls = []
    count = embedder.count_tokens
    embedder.count_tokens = lambda texts: (calls.append(len(texts)), count(texts))[1]
    try:
        c = f.context(budget_tokens=60)
    finally:
        del embedder.count_tokens
    assert c.tokens <= 60 and c.cut and c.turns == list(range(300 - len(c.turns), 300))  # the newest turns
    assert len(calls) <= 3 and calls[0] == 1 + 299  # the header and each line, counted together once
    whole = f.context()
    assert whole.messages[0]["content"].count("\n- topic ") == 299


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


def test_each_length_of_the_evaluation_is_stitched_from_seeds_of_its_own():
    """stitch with one seed gives a longer dialogue the shorter one's turns; the evaluation's
    lengths must be separate samples."""
    stories = [[(f"s{s} q{i}", f"a{i}") for i in range(12)] for s in range(20)]
    assert stitch(stories, 40, 3)[:20] == stitch(stories, 20, 3)  # the trap
    made = stitched_dialogues(stories, (20, 40), 5, seed=0)
    assert [len(d) for d in made[20]] == [20] * 5 and [len(d) for d in made[40]] == [40] * 5
    starts = {tuple(t.user for t in d[:20]) for d in made[40]}
    assert not starts & {tuple(t.user for t in d) for d in made[20]}
    assert made[20] == stitched_dialogues(stories, (20,), 5, seed=0)[20]  # the first length keeps its seeds


def test_metrics_on_hand_made_segmentations():
    turns = [Turn("q", "a", s) for s in [0, 0, 0, 1, 1, 0, 0, 2, 2, 1]]
    perfect = score_dialogue(turns, [0, 0, 0, 1, 1, 0, 0, 2, 2, 1])
    assert perfect["boundary_f1"] == 1.0 and perfect["pk"] == 0 and perfect["windowdiff"] == 0
    assert perfect["return_accuracy"] == 1.0 and perfect["assignment"] == 1.0
    one_tree = score_dialogue(turns, [0] * 10)
    assert one_tree["boundary_recall"] == 0 and one_tree["return_accuracy"] == 1.0
    assert one_tree["assignment"] == 0.5  # the one tree is matched to story 0, which holds 5 of the 10 turns
    assert one_tree["trees_per_topic"] == 1.0 and perfect["trees_per_topic"] == 1.0
    assert perfect["purity"] == 1.0 and one_tree["purity"] == 0.5  # one tree: its most common story holds 5 of 10
    apart = score_dialogue(turns, list(range(10)))  # every turn a tree of its own: over-splitting does not pay
    assert apart["assignment"] == 0.3 and apart["trees_per_topic"] == 10 / 3  # one turn of each story matched
    split = score_dialogue(turns, [0, 0, 0, 1, 1, 3, 3, 2, 2, 1])  # story 0 split over trees 0 and 3
    assert split["assignment"] == 0.8 and split["return_accuracy"] == 0.5
    assert split["return_to_earlier_tree"] == 0.0  # story 0's return opened tree 3: no tree of story 0 before it
    assert split["purity"] == 1.0 and apart["purity"] == 1.0  # splitting a story keeps every tree pure
    mixed = score_dialogue(turns, [0, 0, 0, 0, 1, 1, 1, 2, 2, 2])  # trees of 4, 3 and 3 turns
    assert mixed["purity"] == (3 + 2 + 2) / 10  # story 0 holds 3 of tree 0, 2 of tree 1; story 2 holds 2 of tree 2
    # story 0 split over trees 0 and 3; its last return goes back to tree 0, not to tree 3 where it was left
    stories = [Turn("q", "a", s) for s in [0, 0, 1, 0, 0, 1, 0]]
    back = score_dialogue(stories, [0, 0, 1, 3, 3, 1, 0])
    assert back["return_accuracy"] == 1 / 3 and back["return_to_earlier_tree"] == 1 / 3
    assert perfect["return_to_earlier_tree"] == 0.0
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


def test_the_shortlist_weighs_the_best_fitting_trees_as_a_brute_force_scan_does(embedder):
    from chunktree.track.forest import SHORTLIST

    rng = np.random.default_rng(0)
    dim, n_topics = embedder.dim, SHORTLIST + 9
    f = Forest(embedder, decider="thresholds")
    for i in range(n_topics):  # orthogonal turns: each opens a topic
        v = np.zeros(dim, np.float32)
        v[i] = 1.0
        assert f._place(f"an entirely distinct subject, number {i}", None, v, v).action == "new_topic"
    for _ in range(5):
        v = rng.normal(size=dim).astype(np.float32)
        v /= np.linalg.norm(v)
        candidates, _ = f._weigh(v, "a question", features=False)
        scan = [float(v[i]) for i in range(n_topics)]  # each tree's one node is e_i
        top = sorted(np.argsort(scan)[::-1][:SHORTLIST].tolist() + [n_topics - 1])
        assert [c.tree for c in candidates] == sorted(set(top))
        assert all(abs(c.best_similarity - scan[c.tree]) < 1e-5 for c in candidates)
    shortlisted, x = f.features(v, "a question")
    assert shortlisted == candidates and x.shape[0] == len(candidates)


TOPICS = {"sourdough": ["How long should sourdough rise?", "Which flour gives the best crust?",
                         "When do I add the salt?", "How hot should the oven be?"],
          "whales": ["How did whalers find sperm whales?", "What was a harpoon made of?",
                     "How big was the Pequod?", "Who steered the whaleboat?"],
          "volcanoes": ["Why do volcanoes erupt?", "What is magma made of?", "Which volcano is the tallest?",
                        "Can scientists predict eruptions?"],
          "bicycles": ["Why does my bike chain slip?", "How often should I oil the chain?",
                       "What tyre pressure suits a road bike?", "How do I true a wheel?"],
          "tea": ["How hot should the water be for green tea?", "How long should black tea steep?",
                  "Does milk change the taste of tea?", "Where is oolong grown?"]}


def squad_file(path):
    data = {"data": [{"title": title, "paragraphs": [{"context": "...", "qas": [
        {"question": q, "id": f"{title}{i}", "answers": [{"text": "an answer", "answer_start": 0}]}
        for i, q in enumerate(questions)]}]} for title, questions in TOPICS.items()] * 2}
    path.write_text(json.dumps(data))
    return path


def test_squad_and_coqa_files_give_stories(tmp_path):
    from chunktree.checks import InvalidValueError
    from chunktree.track.data import load_stories

    stories = load_stories(squad_file(tmp_path / "squad.json"))
    assert len(stories) == 10 and stories[0][0] == ("How long should sourdough rise?", "an answer")
    coqa = {"data": [{"questions": [{"turn_id": 1, "input_text": "Who?"}, {"turn_id": 2, "input_text": "Where?"}],
                      "answers": [{"turn_id": 1, "input_text": "Ann"}, {"turn_id": 2, "input_text": None}]}] * 4}
    (tmp_path / "coqa.json").write_text(json.dumps(coqa))
    assert load_stories(tmp_path / "coqa.json")[0] == [("Who?", "Ann"), ("Where?", "")]  # a null answer: none
    (tmp_path / "few.json").write_text(json.dumps({"data": coqa["data"][:2]}))
    with pytest.raises(InvalidValueError, match="2 stories of two or more questions; stitching needs at least 4"):
        load_stories(tmp_path / "few.json")


def test_the_context_frontier_keeps_every_method_within_its_budget_and_below_the_ceiling(embedder, tmp_path):
    from chunktree.track.evaluate import evaluate

    report = evaluate(squad_file(tmp_path / "squad.json"), embedder=embedder, dialogues=2, lengths=(14,),
                      decider="thresholds")
    m = {key: value["mean"] for key, value in report["by_length"][14].items()}
    for share in (25, 50, 75):
        for method in ("forest", "last_n", "top_k", "top_k_neighbours"):
            assert m[f"{method}_at_{share}_tokens"] <= share / 100 + 1e-9
            assert 0.0 <= m[f"{method}_at_{share}_recall"] <= m[f"ceiling_at_{share}_recall"] + 1e-9
            if method != "forest":
                assert m[f"forest_minus_{method}_at_{share}"] == pytest.approx(
                    m[f"forest_at_{share}_recall"] - m[f"{method}_at_{share}_recall"])
    assert m["full_recall"] == 1.0 and m["full_tokens"] == 1.0
    for method in ("forest", "last_n", "top_k", "top_k_neighbours"):
        assert m[f"{method}_at_last_n_tokens"] <= m["last_n_tokens"] + 1e-9
        assert m[f"{method}_at_last_n_recall"] <= m["ceiling_at_last_n_recall"] + 1e-9  # no context holds more
    assert m["forest_at_25_recall"] <= m["forest_at_75_recall"] + 1e-9


def test_the_ceiling_is_the_most_a_context_within_the_budget_can_hold():
    """Two stories, turns of 10, 5, 30, 10, 10 and 10 tokens; at 75% of the tokens so far the best
    context holds the current turn and then its story's shortest earlier turns, worked by hand:
    turn 2 (33 tokens): itself, 30, and turn 0 (10) no longer fits: 0 of 1;
    turn 3 (41): itself, turn 0; turn 2 (30) does not fit: 1 of 2;
    turn 4 (48): itself and turn 1: 1 of 1;
    turn 5 (56): itself, turns 0 and 3; turn 2 does not fit: 2 of 3."""
    from chunktree.track.data import Turn
    from chunktree.track.evaluate import score_context

    turns = [Turn(f"q{i}", f"a{i}", story) for i, story in enumerate([0, 1, 0, 0, 1, 0])]
    tokens = np.array([10, 5, 30, 10, 10, 10])
    forest_holds_nothing = [{name: ([], 0) for name in ("full", "25", "50", "75", "last_n")}] * 6
    m = score_context(turns, forest_holds_nothing, np.eye(6, dtype=np.float32), tokens)
    assert m["ceiling_at_75_recall"] == pytest.approx(np.mean([0, 1 / 2, 1, 2 / 3]))
    assert m["forest_minus_top_k_at_75"] == -m["top_k_at_75_recall"]


def _synthetic_forest(embedder, n, seed=0):
    rng = np.random.default_rng(seed)
    f = Forest(embedder, decider="thresholds")
    centres = rng.normal(size=(5, embedder.dim))
    for i in range(n):
        v = centres[(i // 4) % 5] + 0.3 * rng.normal(size=embedder.dim)
        v = (v / np.linalg.norm(v)).astype(np.float32)
        f._place(f"a question about subject {(i // 4) % 5}, turn {i}", f"an answer {i}", v, v)
        yield f


def test_save_turn_appends_to_a_journal_and_load_replays_it(embedder, tmp_path):
    from chunktree.track.storage import JOURNAL_MIN

    path, journal = tmp_path / "c.json", tmp_path / "c.json.journal"
    rewrites, f = 0, None
    for f in _synthetic_forest(embedder, 300):
        before = path.stat().st_mtime_ns if path.exists() else None
        f.save_turn(path)
        rewrites += before != path.stat().st_mtime_ns
        lines = journal.read_text().count("\n") if journal.exists() else 0
        base = len(json.loads(path.read_text())["nodes"])
        assert base + lines == len(f.nodes) and lines <= max(JOURNAL_MIN, base)
    assert rewrites <= 4  # 1, 65, 130, 260: the file is rewritten after as many turns as it holds
    assert Forest.load(path, embedder, decider="thresholds").to_dict() == f.to_dict()
    with journal.open("a") as out:
        out.write('{"node": {"id": 300, "tree"')  # a crash cut the last line short: a turn never acknowledged
    again = Forest.load(path, embedder, decider="thresholds")
    assert again.to_dict() == f.to_dict()
    turn = ("a question about subject 1, once more", None)
    assert again.add(*turn).to_dict() == f.add(*turn).to_dict()  # and it goes on alike
    again.save_turn(path)  # not appended onto the cut line: the file is rewritten
    assert Forest.load(path, embedder, decider="thresholds").to_dict() == f.to_dict()


def test_a_whole_journal_line_without_its_newline_is_not_appended_onto(embedder, tmp_path):
    path, journal = tmp_path / "c.json", tmp_path / "c.json.journal"
    for f in _synthetic_forest(embedder, 20):
        f.save_turn(path)
    journal.write_text(journal.read_text().removesuffix("\n"))  # a crash before the newline
    again = Forest.load(path, embedder, decider="thresholds")
    assert again.to_dict() == f.to_dict()
    again.add("one more question about subject 2", None)
    again.save_turn(path)
    assert Forest.load(path, embedder, decider="thresholds").to_dict() == again.to_dict()


def test_a_rewrite_that_crashed_before_emptying_the_journal_loads_once(embedder, tmp_path):
    path, journal = tmp_path / "c.json", tmp_path / "c.json.journal"
    forests = _synthetic_forest(embedder, 80)
    for f in forests:
        f.save_turn(path)
    kept = journal.read_text()
    f.save(path)  # the whole forest rewritten, then the journal removed ...
    journal.write_text(kept)  # ... unless a crash came first: its turns are already in the file
    assert Forest.load(path, embedder, decider="thresholds").to_dict() == f.to_dict()
    journal.write_text(kept.replace('"id": 70', '"id": 700', 1) if '"id": 70' in kept else kept + "{}\n")
    with pytest.raises(ForestFileError, match=r"c\.json"):
        Forest.load(path, embedder, decider="thresholds")


@pytest.mark.parametrize("line", ['{"node": 5, "tree": {}, "vector": ""}', '{"node": {"id": 6, "tree": 0, "parent": 5}, '
                                  '"tree": [1], "vector": ""}', "[1, 2]", "not json"])
def test_a_damaged_journal_line_is_named(embedder, forest, tmp_path, line):
    f, _ = forest
    f.save(tmp_path / "c.json")
    (tmp_path / "c.json.journal").write_text(line + "\n")
    with pytest.raises(ForestFileError, match=r"c\.json: not a readable forest file"):
        Forest.load(tmp_path / "c.json", embedder)


FOUR_SUBJECTS = Path(__file__).resolve().parents[1] / "fixtures" / "four_subjects.jsonl"


def test_a_chat_of_four_subjects_with_unannounced_returns(embedder):
    """tests/fixtures/four_subjects.jsonl: 22 turns about tomatoes, Lisbon, a dripping faucet and a
    guitar, each subject coming back without saying so. A return that names its subject resumes
    its tree, by the network's choice or by a strong match with an earlier turn ("When should I
    pick the tomatoes?" after two guitar turns). Not every return is placed: see docs/track.md,
    Limits."""
    turns = [json.loads(line) for line in FOUR_SUBJECTS.read_text().splitlines()]
    f = Forest(embedder)
    decisions = [f.add(t["user"], t["assistant"]) for t in turns]
    tree_of = {t["topic"]: d.tree for t, d in zip(turns, decisions)}  # each subject's latest tree
    first = {}
    for t, d in zip(turns, decisions):
        first.setdefault(t["topic"], d.tree)
    assert len(set(first.values())) == 4  # each subject opens a tree of its own
    assert decisions[14].tree == first["lisbon"] and decisions[16].tree == first["faucet"]  # returns
    assert decisions[20].tree == first["tomatoes"] and "matches it strongly" in decisions[20].rule
    assert tree_of["tomatoes"] == first["tomatoes"]


def test_a_call_may_embed_through_another_embedder_of_the_same_vectors(embedder):
    """add(embedder=) and context(embedder=) embed through the embedder given (a service's
    micro-batcher), which must make the forest's vectors; one of another model is refused."""
    import types

    calls = []

    class Counting:
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def embed(self, texts, **kwargs):
            calls.append(list(texts))
            return self.inner.embed(texts, **kwargs)

    forest = Forest(embedder)
    forest.add("How long should bread dough rise?", embedder=Counting(embedder))
    forest.context(100, query="What about the temperature?", embedder=Counting(embedder))
    assert len(calls) == 2 and "What about the temperature?" in calls[1][0]
    other = types.SimpleNamespace(vectors_id="another-model@1", model_id="another-model")
    with pytest.raises(ValueError, match="embedder makes the vectors of 'another-model'") as refused:
        forest.add("And the oven?", embedder=other)
    assert refused.value.param == "embedder" and len(forest.nodes) == 1


def test_replay_places_a_dialogue_as_add_does_turn_by_turn(embedder):
    turns = [("How long should bread dough rise?", "About an hour."), ("And at what temperature?", None),
             ("What is the capital of Portugal?", "Lisbon."), ("Back to the dough: can it rise overnight?", None)]
    one_by_one = Forest(embedder)
    want = [one_by_one.add(user, assistant).to_dict() for user, assistant in turns]
    replayed = Forest(embedder)
    got = replayed.replay(iter(turns))
    assert next(got).to_dict() == want[0] and len(replayed.nodes) == 1  # a decision as each turn is placed
    assert [d.to_dict() for d in got] == want[1:]
    assert replayed.to_dict() == one_by_one.to_dict()

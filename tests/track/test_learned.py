"""The learned decider: the shipped one on a chat of four stretches with a return, fitting from
files through the CLI, its file's round trip and errors, and eval-track on a segmentation file."""

import json
from pathlib import Path

import numpy as np
import pytest

from chunktree.apps.cli.main import main
from chunktree.track import Forest
from chunktree.track.data import load_labelled
from chunktree.track.learned import DeciderFileError, LearnedDecider, default_decider, n_features
from chunktree.track.train import fit_network, fit_weights

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "dialogue.jsonl"
CHATS = EXAMPLE.with_name("chats.jsonl")  # hand-written chats of four stretches with a return, topics labelled


def test_the_shipped_decider_keeps_the_example_chat_in_its_four_stretches_and_resumes_bread(embedder):
    turns = [json.loads(line) for line in EXAMPLE.read_text(encoding="utf-8").splitlines()]
    forest = Forest(embedder)
    decisions = [forest.add(t["user"], t.get("assistant")) for t in turns]
    assert [d.tree for d in decisions] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 0, 0, 0]
    assert decisions[9].action == "switch" and decisions[9].parent == 2  # back where bread was left
    assert all(c.probability is not None for d in decisions[1:] for c in d.candidates)
    assert default_decider().info["validation_pk"]  # how it was made travels with it


def test_fit_weights_recovers_a_logistic_model():
    rng = np.random.default_rng(0)
    x = np.c_[np.ones(4000), rng.normal(size=(4000, 3))]
    w_true = np.array([0.5, 2.0, -1.0, 0.0])
    y = (rng.random(4000) < 1 / (1 + np.exp(-x @ w_true))).astype(np.float32)
    w, mean, scale = fit_weights(x, y, l2=1.0)
    decider = LearnedDecider(w, mean, scale)
    want = 1 / (1 + np.exp(-x @ w_true))
    assert np.abs(decider.probabilities(x) - want).max() < 0.05


def test_fit_network_learns_an_interaction_a_logistic_regression_cannot():
    # p = sigmoid(4 x1 x2): no linear function of x1 and x2 separates it; a hidden layer does.
    rng = np.random.default_rng(3)
    x = np.c_[np.ones(4000), rng.normal(size=(4000, 2))]
    want = 1 / (1 + np.exp(-4 * x[:, 1] * x[:, 2]))
    y = (rng.random(4000) < want).astype(np.float32)
    w, mean, scale, w1, b1 = fit_network(x, y, hidden=8, l2=1.0)
    network = LearnedDecider(w, mean, scale, hidden_weights=w1, hidden_bias=b1)
    linear = LearnedDecider(*fit_weights(x, y, l2=1.0))
    assert np.abs(network.probabilities(x) - want).mean() < 0.08
    assert np.abs(linear.probabilities(x) - want).mean() > 0.25


def test_a_decider_file_round_trips_and_a_bad_one_is_refused(tmp_path):
    d = default_decider()
    assert d.hidden_weights is not None  # the shipped decider has its hidden layer
    linear = LearnedDecider(np.linspace(-1, 1, d.mean.size), d.mean, d.scale, 0.4, None, {"made": "here"})
    for i, decider in enumerate((d, linear)):
        decider.save(tmp_path / f"d{i}.bin")  # an .npz whatever the name
        again = LearnedDecider.load(tmp_path / f"d{i}.bin")
        f = np.random.default_rng(1).normal(size=(5, d.mean.size)).astype(np.float32)
        assert np.array_equal(again.probabilities(f), decider.probabilities(f)) and again.info == decider.info
        assert (again.threshold, again.return_similarity) == (decider.threshold, decider.return_similarity)
    np.savez(tmp_path / "cut.npz", **{**dict(np.load(tmp_path / "d0.bin")), "hidden_bias": np.zeros(3)})
    with pytest.raises(DeciderFileError, match=r"cut.npz: damaged weights \(shapes \(17,\), \(790,\), \(790,\), "
                                               r"\(790, 16\), \(3,\)\)"):
        LearnedDecider.load(tmp_path / "cut.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a decider")
    with pytest.raises(DeciderFileError, match=r"junk.npz: not a decider file written by 'chunktree train-track'"):
        LearnedDecider.load(tmp_path / "junk.npz")
    with pytest.raises(ValueError, match=r"decider must be None .* got 3"):
        Forest(decider=3)
    small = LearnedDecider(np.zeros(n_features(8)), np.zeros(n_features(8)), np.ones(n_features(8)))
    with pytest.raises(ValueError, match="the decider expects 8-dimensional vectors; the embedder makes 384"):
        Forest(decider=small)


def test_train_track_fits_from_jsonl_and_track_uses_it(tmp_path, capsys):
    topics = {"bread": ["How long should sourdough rise?", "Which flour makes the best crust?",
                        "Should the oven be preheated with the pot inside?"],
              "ships": ["How did whalers find sperm whales at sea?", "What was a harpoon line made of?",
                        "How many men rowed a whaleboat?"]}
    lines = [{"conversation": f"c{c}", "user": text, "topic": name}
             for c in range(4) for name in (["bread", "ships"] if c % 2 else ["ships", "bread"]) for text in topics[name]]
    data = tmp_path / "turns.jsonl"
    data.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert len(load_labelled(data)) == 4
    out = tmp_path / "mine.npz"
    assert main(["train-track", str(data), "-o", str(out), "--no-cache"]) == 0
    assert f"wrote {out}: a logistic regression (fewer than 2,000 pairs: too few for the network), fitted on 4 " \
           "dialogues" in capsys.readouterr().out
    chat = tmp_path / "chat.jsonl"
    chat.write_text("".join(json.dumps({"user": t}) + "\n" for t in topics["bread"] + topics["ships"]))
    assert main(["track", str(chat), "--decider", str(out), "--no-cache", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["tree"] for d in doc["conversations"]["default"]["decisions"]] == [0, 0, 0, 1, 1, 1]
    few = tmp_path / "few.jsonl"  # one chat of two short topics: too little to fit anything
    few.write_text("".join(json.dumps(x) + "\n" for x in lines[1:5]))
    assert main(["train-track", str(few), "-o", str(tmp_path / "few.npz"), "--no-cache"]) == 2
    assert "1 dialogue(s) of 4 turns give 4 turn-tree pairs (2 of the turn's own topic) and 1 topic change(s); a " \
           "decider needs at least 20 pairs, 2 changes" in capsys.readouterr().err
    assert not (tmp_path / "few.npz").exists()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"user": "no topic here"}) + "\n")
    assert main(["train-track", str(bad), "-o", str(out), "--force"]) == 2
    assert "bad.jsonl:1: a turn needs a 'topic'" in capsys.readouterr().err


def test_eval_track_reads_a_segmentation_file(tmp_path, capsys):
    dialogues = [{"dial_id": i, "utterances": ["How long should sourdough rise?", "About twelve hours in a cool room.",
                                               "Which flour makes the best crust?", "How did whalers find whales?",
                                               "They watched for spouts from the masthead.", "What was a harpoon made of?"],
                  "segments": [3, 3]} for i in range(3)]
    path = tmp_path / "seg.json"
    path.write_text(json.dumps(dialogues))
    out = tmp_path / "report.json"
    assert main(["eval-track", str(path), "--no-cache", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("3 dialogues, 18 utterances, mean segment 3.0") and "| thresholds |" in text
    report = json.loads(out.read_text())
    assert set(report["methods"]) == {"forest", "thresholds", "random", "even"}
    assert report["methods"]["even"]["pk"]["mean"] == 0.0  # told two segments of three: exactly right


def test_placed_as_labelled_pairs_the_trees_with_the_topics_in_order_of_appearance():
    from chunktree.track.evaluate import placed_as_labelled

    assert placed_as_labelled(["a", "a", "b", "a"], [7, 7, 3, 7]) == 1.0  # tree ids need not match topic names
    assert placed_as_labelled(["a", "a", "b", "b"], [0, 0, 0, 1]) == 0.75  # b's first turn stayed in a's tree
    # one tree opened too early shifts every later pairing: the 2nd tree stands for the 2nd topic
    assert placed_as_labelled(["a", "a", "b", "b", "a"], [0, 1, 2, 2, 0]) == 0.4


def test_eval_track_reads_labelled_chats(tmp_path, capsys):
    out = tmp_path / "report.json"
    assert main(["eval-track", str(CHATS), "--no-cache", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("6 chats, 72 turns") and "| thresholds |" in text
    report = json.loads(out.read_text())
    assert [c["chat"] for c in report["by_chat"]] == ["bike", "garden", "travel", "car", "cat", "bread"]
    assert all(c["topics"] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 0, 0, 0] for c in report["by_chat"])
    forest, thresholds = (report["methods"][m]["placed_as_labelled"]["mean"] for m in ("forest", "thresholds"))
    assert forest > thresholds  # the shipped decider keeps the chats' topics better than the baseline rule
    bread = report["by_chat"][-1]
    assert bread["trees"] == bread["topics"]
    assert main(["eval-track", str(CHATS), "--calibrate"]) == 2
    assert "--calibrate searches the threshold rule on CoQA" in capsys.readouterr().err


def test_announced_changes_and_returns():
    from chunktree.track.decide import announced

    assert announced("Switching gears: how do volcanoes form?") == "switch"
    assert announced("Different question: what is a pod?") == "switch"
    assert announced("By the way, which flour is best?") == "switch"
    assert announced("Back to the bread: how long should it proof?") == "return"
    assert announced("Going back to my bike, what chain do I need?") == "return"
    assert announced("About the car again: the garage says the battery is old.") == "return"
    assert announced("About volcanoes: how do they form?") is None  # a subject, not a return to one
    assert announced("Tell me about it again.") is None
    assert announced("How do I go back to an older commit?") is None  # not at the start: a question about "back"
    assert announced("What is the difference between a pod and a node?") is None


def test_the_learned_rule_obeys_an_announcement():
    from chunktree.track.decide import Candidate, Thresholds, decide_learned

    current = Candidate(0, 5, 0.6, 5, 0.6, probability=0.9)
    other = Candidate(1, 2, 0.1, 2, 0.1, probability=0.2)
    t = Thresholds()
    assert decide_learned([current, other], 0, {5}, t, 0.5, 0.15).tree == 0
    assert decide_learned([current, other], 0, {5}, t, 0.5, 0.15, "switch").action == "new_topic"
    back = decide_learned([current, other], 0, {5}, t, 0.5, 0.15, "return")
    assert (back.action, back.tree, back.parent) == ("switch", 1, 2)
    likely = Candidate(1, 2, 0.5, 2, 0.5, probability=0.7)
    assert decide_learned([current, likely], 0, {5}, t, 0.5, 0.15, "switch").tree == 1
    # an announced return goes to the earlier tree the turn fits best, whatever the model ranks first
    probable, fitting = Candidate(1, 2, 0.05, 2, 0.05, probability=0.3), Candidate(2, 7, 0.45, 7, 0.45, probability=0.01)
    back = decide_learned([current, probable, fitting], 0, {5}, t, 0.5, 0.15, "return")
    assert (back.action, back.tree, back.parent) == ("switch", 2, 7)


def test_turn_cues_and_topic_words():
    from chunktree.track.decide import topic_words, turn_cues

    assert turn_cues("And how many stretch and folds?") == (1.0, 0.0)
    assert turn_cues("What about the crust of it?") == (1.0, 1.0)
    assert turn_cues("Is the chain worn out?") == (0.0, 0.0)
    assert topic_words("How many stretch and folds? One fold.") == {"stretch", "fold"}
    assert topic_words("A glass of water") == {"glass", "water"}  # "glass" keeps its s

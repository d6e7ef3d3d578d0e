"""The segmentation benchmarks' metrics against hand-computed cases and a brute-force reading of
their definitions, the file format's errors, and the baselines."""

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chunktree.track.data import labels_from_segments, load_segmentation
from chunktree.track.segmentation import (
    baseline_even,
    boundary_scores,
    labels_from_topics,
    pk,
    window,
    windowdiff,
)


def test_labels_mark_the_last_utterance_of_each_segment_but_the_final_one():
    assert labels_from_segments([3, 2, 4]).tolist() == [0, 0, 1, 0, 1, 0, 0, 0, 0]
    assert labels_from_topics([7, 7, 7, 2, 2, 7, 7, 7, 7]).tolist() == [0, 0, 1, 0, 1, 0, 0, 0, 0]


def test_hand_computed_pk_and_windowdiff():
    ref = np.array([0, 0, 1, 0, 0, 0])
    none = np.zeros(6, int)
    # windows of 2 labels: [0,0] [0,1] [1,0] [0,0] [0,0]; the reference has a boundary in two of five
    assert pk(ref, ref, 2) == 0.0 and pk(ref, none, 2) == pytest.approx(2 / 5)
    shifted = np.array([0, 0, 0, 1, 0, 0])  # one utterance late: windows [0,0] [0,0] [0,1] [1,0] [0,0]
    assert pk(ref, shifted, 2) == pytest.approx(2 / 5) and windowdiff(ref, shifted, 2) == pytest.approx(2 / 5)
    double = np.array([0, 1, 1, 0, 0, 0])  # windows hold 1, 2, 1, 0, 0 boundaries against 0, 1, 1, 0, 0
    assert pk(ref, double, 2) == pytest.approx(1 / 5) and windowdiff(ref, double, 2) == pytest.approx(2 / 5)


def test_the_window_is_half_the_mean_segment_at_least_two():
    assert window(labels_from_segments([5, 5, 5, 5])) == 2  # round(2.5) is 2, as Python rounds
    assert window(labels_from_segments([6, 6])) == 3 and window(labels_from_segments([2, 1, 1])) == 2


@given(st.lists(st.integers(1, 6), min_size=1, max_size=8), st.lists(st.integers(1, 6), min_size=1, max_size=8),
       st.integers(2, 5))
def test_metrics_match_a_direct_reading_of_the_definitions(a, b, k):
    n = max(sum(a), sum(b))
    a[-1] += n - sum(a)
    b[-1] += n - sum(b)
    ref, hyp = labels_from_segments(a), labels_from_segments(b)
    if n < k:
        return
    windows = range(n - k + 1)  # NLTK's windows: k labels from each position that has k left
    want_pk = np.mean([(ref[i:i + k].sum() > 0) != (hyp[i:i + k].sum() > 0) for i in windows])
    want_wd = np.mean([ref[i:i + k].sum() != hyp[i:i + k].sum() for i in windows])
    assert pk(ref, hyp, k) == pytest.approx(want_pk) and windowdiff(ref, hyp, k) == pytest.approx(want_wd)


def test_boundary_scores_and_the_even_baseline():
    ref = labels_from_segments([4, 6])
    assert boundary_scores(ref, ref) == {"boundary_precision": 1.0, "boundary_recall": 1.0, "boundary_f1": 1.0}
    assert boundary_scores(ref, np.zeros(10, int))["boundary_f1"] == 0.0
    assert baseline_even(ref).tolist() == labels_from_segments([5, 5]).tolist()  # told two segments


@pytest.mark.parametrize("data, message", [
    ([{"utterances": ["a", "b"], "segments": [1]}], r"dialogue 0: 'segments' must be lengths >= 1 that sum to the 2"),
    ([{"utterances": ["a", ""], "segments": [2]}], r"dialogue 0: 'utterances' must be a list of non-empty strings"),
    ({"data": []}, "not a segmentation file"),
])
def test_a_malformed_file_is_one_error_naming_the_dialogue(tmp_path, data, message):
    path = tmp_path / "seg.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message):
        load_segmentation(path)

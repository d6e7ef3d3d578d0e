"""Plain progress lines (stderr that is not a terminal): at most one a interval, and a last line
only when it says something new."""

import io
import time

from chunktree.progress import PlainProgress


def test_the_last_line_is_printed_once():
    out = io.StringIO()
    bar = PlainProgress(3, "embed", "texts", file=out, interval=0.0)
    for _ in range(3):
        bar.update(1)
    bar.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and lines[-1].startswith("embed: 3/3 texts (100%)")


def test_a_long_run_ends_with_a_line_for_what_came_after_the_last_one():
    out = io.StringIO()
    bar = PlainProgress(4, "embed", "texts", file=out, interval=0.05)
    time.sleep(0.06)
    bar.update(2)  # a line: the interval has passed
    bar.update(2)  # none: within the interval of the last one
    bar.close()  # the run outlasted the interval, and the last line is out of date
    lines = out.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == ["embed: 2/4 texts (50%)", "embed: 4/4 texts (100%)"]


def test_a_short_run_prints_nothing():
    out = io.StringIO()
    bar = PlainProgress(2, "embed", "texts", file=out, interval=3600.0)
    bar.update(2)
    bar.close()
    assert out.getvalue() == ""


def test_a_callable_gets_every_line_and_nothing_is_written(monkeypatch, capfd):
    """``progress=callable``: the lines a run would write on stderr go to the callable instead, the
    counters' lines (K-means, the search, the writing) and the stage lines alike."""
    import numpy as np

    from chunktree.engine.datasets import synthetic_embeddings
    from chunktree.engine.order import order
    from chunktree.progress import say

    monkeypatch.setenv("CHUNKTREE_PROGRESS_SECONDS", "0")
    monkeypatch.setattr("chunktree.engine.order.STAGE_LINE_S", 0.0)  # every stage says its line
    lines = []
    result = order(synthetic_embeddings(3000, seed=2), method="sparse", progress=lines.append)
    result.write_json(io.StringIO(), progress=lines.append)
    assert capfd.readouterr().err == ""
    said = "\n".join(lines)
    for part in ("order: K-means", "order: neighbour search: 3.0k/3.0k rows", "order: forest of the neighbour graph",
                 "traversal", "order: writing: 3.0k/3.0k rows (100%)"):
        assert part in said, (part, said)
    assert np.array_equal(result.order, order(synthetic_embeddings(3000, seed=2), method="sparse").order)
    say(False, "dropped")
    say(True, "on stderr")
    assert capfd.readouterr().err == "on stderr\n"

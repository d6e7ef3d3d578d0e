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

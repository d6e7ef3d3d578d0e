"""Shared pieces of the benchmark suites: results gathered per run and a summary of ratios at the end.

Run: python -m pytest bench            (opt-in; the default test run does not collect bench/)
"""

from collections import defaultdict

import pytest

RESULTS: dict[str, dict] = defaultdict(dict)
SUMMARIES = []


def summary(fn):
    """Register a function(RESULTS) -> list of lines, printed after the benchmarks."""
    SUMMARIES.append(fn)
    return fn


def pytest_terminal_summary(terminalreporter):
    lines = [line for fn in SUMMARIES for line in fn(RESULTS)]
    if lines:
        terminalreporter.section("chunktree benchmark summary")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def results():
    return RESULTS

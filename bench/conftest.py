"""Shared pieces of the benchmark suites: results gathered per suite, a summary of ratios printed
at the end, and each suite's results written to ``bench/results/<suite>.json`` (``record``).

Run: python -m pytest bench/bench_order.py    (opt-in; the default test run does not collect bench/)
"""

import sys
from collections import defaultdict

import pytest
import record

# RESULTS[suite][group][case]: what each suite (a bench_*.py module) measured in this run.
RESULTS: dict[str, dict] = defaultdict(lambda: defaultdict(dict))
SUMMARIES = []
LINES: dict[str, list[str]] = {}  # each suite's summary lines, made once at the end of the session


def summary(fn):
    """Register a function(results of its suite) -> list of lines, printed after the benchmarks
    and stored with the suite's results."""
    SUMMARIES.append(fn)
    return fn


def _summaries(suite):
    return [line for fn in SUMMARIES if fn.__module__ == suite for line in fn(RESULTS[suite])]


def pytest_terminal_summary(terminalreporter):  # after pytest_sessionfinish, which fills LINES
    lines = [line for suite in sorted(LINES) for line in LINES[suite]]
    if lines:
        terminalreporter.section("chunktree benchmark summary")
        for line in lines:
            terminalreporter.write_line(line)


def pytest_sessionfinish(session):
    for suite in sorted(RESULTS):
        if not any(RESULTS[suite].values()):
            continue
        module = sys.modules.get(suite)
        LINES[suite] = _summaries(suite)
        args = " ".join(session.config.invocation_params.args) or "bench"
        path = record.write(suite, record.title(module.__doc__ if module else None, suite), f"python -m pytest {args}",
                            LINES[suite], RESULTS[suite])
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(f"wrote {path}")


@pytest.fixture(scope="module")
def results(request):
    """This suite's results: ``results[group][case] = {...}``."""
    return RESULTS[request.module.__name__]

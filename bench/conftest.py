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


def summary(fn):
    """Register a function(results of its suite) -> list of lines, printed after the benchmarks
    and stored with the suite's results."""
    SUMMARIES.append(fn)
    return fn


def _summaries(suite):
    return [line for fn in SUMMARIES if fn.__module__ == suite for line in fn(RESULTS[suite])]


def pytest_terminal_summary(terminalreporter):
    lines = [line for suite in sorted(RESULTS) for line in _summaries(suite)]
    if lines:
        terminalreporter.section("chunktree benchmark summary")
        for line in lines:
            terminalreporter.write_line(line)


def pytest_sessionfinish(session):
    for suite in sorted(RESULTS):
        if not any(RESULTS[suite].values()):
            continue
        module = sys.modules.get(suite)
        title = " ".join((module.__doc__ or suite).strip().split("\n\n")[0].split()) if module else suite
        args = " ".join(session.config.invocation_params.args) or "bench"
        path = record.write(suite, title, f"python -m pytest {args}", _summaries(suite), RESULTS[suite])
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(f"wrote {path}")


@pytest.fixture(scope="module")
def results(request):
    """This suite's results: ``results[group][case] = {...}``."""
    return RESULTS[request.module.__name__]

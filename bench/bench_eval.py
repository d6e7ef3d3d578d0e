"""Whether an order helps a bounded reader: ``chunktree eval-order`` on the shared question sets,
HotpotQA (423 dev questions, distractor setting: 10 paragraphs, 2 gold, in a shuffle) and
SQuAD-Shifts (48 recent Wikipedia articles, 7,936 questions), every strategy against the
``document`` and ``dense`` baselines, means with 95% bootstrap intervals and paired differences.

    python -m pytest bench/bench_eval.py          # needs ../shared/data beside the checkout

Goal (reported, not asserted): the default order reaches the later gold paragraph earlier than
dense on bridge questions and no later than dense on comparison questions.
"""

from pathlib import Path

import pytest
from conftest import summary

from chunktree.engine.cache import EmbeddingCache
from chunktree.engine.evaluate import evaluate_orders, format_report, load
from chunktree.engine.inputs import default_embedder
from chunktree.engine.order import DEFAULT_STRATEGY

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SETS = {"hotpot": "hotpotqa_dev_sample.jsonl", "squad": "squad_shifts_new_wiki_v1.0.json"}


@pytest.mark.parametrize("name", list(SETS))
def test_eval_order(results, name):
    path = DATA / SETS[name]
    if not path.is_file():
        pytest.skip(f"{path} not found")
    fmt, passages = load(path)
    result = evaluate_orders(passages, default_embedder(), EmbeddingCache())
    results["eval"][name] = {"summary": result["summary"], "report": format_report(result, fmt).splitlines()}
    results["eval"]["default"] = DEFAULT_STRATEGY


@summary
def _report(results):
    lines = []
    for name in SETS:
        r = results.get("eval", {}).get(name)
        if r:
            lines += [f"{SETS[name]}:", "", *r["report"], ""]
    return lines

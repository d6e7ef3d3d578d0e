"""Measure: does an order help a bounded reader? (``chunktree eval-order``)

- ``data``: SQuAD-format JSON and HotpotQA-style JSONL read into one shape (passages, questions,
  gold paragraphs, question kinds);
- ``runner``: every order and each extractive reader over every question, the metrics, and their
  summary with bootstrap intervals and paired differences;
- ``stats``: the bootstrap;
- ``report``: the summary as Markdown tables;
- ``llm_eval``: the real Chain-of-Agents reader over an LLM per question and order, scored by
  exact match and F1, with a persistent cache of LLM calls.
"""

from chunktree.engine.evaluate.data import Passage, Question, load
from chunktree.engine.evaluate.report import format_report
from chunktree.engine.evaluate.runner import ORDERS, READERS, evaluate_orders

__all__ = ["ORDERS", "READERS", "Passage", "Question", "evaluate_orders", "format_report", "load"]

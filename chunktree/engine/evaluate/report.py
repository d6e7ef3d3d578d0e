"""The evaluation summary as Markdown: one table per question kind, then the paired differences."""

from __future__ import annotations

from typing import Any

COLUMNS = [  # (summary key, header, percent?)
    ("later_gold", "later gold position (0 first, 1 last)", False),
    ("gap", "gap between the gold pair", False),
    ("adjacent", "gold pair adjacent", True),
    ("first3", "both gold in first 3", True),
    ("entity_distance", "distance between answer-bearing paragraphs", False),
]
READER_COLUMNS = [("gold_all", "all gold held", True), ("answer_held", "answer held", True)]
DIFFS = [("later_gold", False), ("gold_all", True)]


def _cell(ci: dict[str, float] | None, percent: bool) -> str:
    if not ci or not ci["n"]:
        return "—"
    scale, digits = (100, 1) if percent else (1, 3)
    return f"{scale * ci['mean']:.{digits}f} [{scale * ci['lo']:.{digits}f}, {scale * ci['hi']:.{digits}f}]"


def left_out_note(result: dict[str, Any]) -> str:
    """The report's note of the passages that could not be evaluated, or nothing."""
    n = result.get("passages_left_out", 0)
    return f"; {n} passage{'s' * (n != 1)} with fewer than 2 paragraphs or no question left out" if n else ""


def format_report(result: dict[str, Any], fmt: str = "") -> str:
    """Markdown tables of ``evaluate_orders``'s result: means with 95% bootstrap intervals."""
    readers = list(result["readers"])
    lines = [f"{fmt + ': ' if fmt else ''}memory budget {100 * result['budget']:.0f}% of each passage; "
             "mean [95% bootstrap interval]; percentages where marked %; readers: "
             + ", ".join(f"{r} (memory weight {w})" for r, w in result["readers"].items()) + left_out_note(result)]
    for kind, block in result["summary"].items():
        orders = block["orders"]
        first: dict[str, Any] = next(iter(orders.values()), {})
        cols = [(k, h, p) for k, h, p in COLUMNS if k in first]
        rcols = [(f"{r}:{k}", f"{h}, {r} reader", p) for k, h, p in READER_COLUMNS for r in readers
                 if f"{r}:{k}" in first]
        edge = block["tree_edge"]
        lines += ["", f"**{kind}** ({block['questions']} questions"
                  + (f"; the gold pair is a Chow-Liu tree edge in {_cell(edge, True)}%" if edge["n"] else "") + ")", "",
                  "| order | " + " | ".join(h + (" %" if p else "") for _, h, p in cols + rcols) + " |",
                  "|---" * (1 + len(cols) + len(rcols)) + "|"]
        for name, entry in orders.items():
            lines.append(f"| {name} | " + " | ".join(_cell(entry.get(k), p) for k, _, p in cols + rcols) + " |")
        keys = [(k, p) for k, p in DIFFS if k in first] + [(f"{r}:{k}", p) for k, p in DIFFS for r in readers
                                                             if f"{r}:{k}" in first]
        lines += ["", "paired difference from document / from dense (negative later gold = earlier):", "",
                  "| order | " + " | ".join(f"{k} − {b}" for k, _ in keys for b in ("document", "dense")) + " |",
                  "|---" * (1 + 2 * len(keys)) + "|"]
        for name, entry in orders.items():
            lines.append(f"| {name} | " + " | ".join(_cell(entry.get(f"{k} - {b}"), p) for k, p in keys
                                                   for b in ("document", "dense")) + " |")
    return "\n".join(lines)

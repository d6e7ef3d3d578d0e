"""Render the benchmark page and the README's headline table from ``bench/results/*.json``.

    python bench/render.py            # write docs/benchmarks.md and the README's table
    python bench/render.py --check    # exit 1 if either differs from what the results render (CI)

No figure is typed by hand: every number on the page and in the table comes from a results file,
which says what ran, on which machine, with which command and at which commit (``record.py``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
PAGE = ROOT / "docs" / "benchmarks.md"
README = ROOT / "README.md"
START, END = "<!-- headline table: rendered by bench/render.py -->", "<!-- end of headline table -->"


def load() -> dict[str, dict[str, Any]]:
    """Every results file by name: each suite's default run, then its runs with larger settings."""
    files = sorted(RESULTS.glob("*.json"), key=lambda p: (p.stem.split("--")[0], p.stem))
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in files}


def _get(doc: dict[str, Any] | None, *path: str) -> Any:
    value: Any = doc["results"] if doc else None
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def _runs(docs: dict[str, dict[str, Any]], suite: str) -> list[dict[str, Any]]:
    """The suite's results files: the default run first, then the runs with larger settings."""
    return [doc for doc in docs.values() if doc["suite"] == suite]


# Each headline row: (suite, a function of its results file giving the row's cells, or None when
# the file lacks the case). Cells: what was measured, chunktree, the reference, the comparison.
def _naive(doc: dict[str, Any]) -> list[str] | None:
    r = _get(doc, "order", "naive_2000")
    return r and ["order 2,000 chunks from embeddings", f"{r['ours_s'] * 1e3:.1f} ms",
                  f"naive sklearn + networkx pipeline {r['naive_s']:.2f} s", f"{r['naive_s'] / r['ours_s']:.0f}× faster"]


def _exact(doc: dict[str, Any]) -> list[str] | None:
    r = _get(doc, "order", "exact_20000")
    return r and ["exact tree, 20,000 chunks", f"{r['order_s']:.2f} s, peak {r['peak_mb'] / 1024:.2f} GiB",
                  f"one `X @ X.T` {r['gemm_s']:.2f} s", f"{r['order_s'] / r['gemm_s']:.2f}× its time"]


def _sparse(doc: dict[str, Any]) -> list[str] | None:
    for n, topics in ((50_000, 2_500), (20_000, 1_000)):  # the largest fuzzy case with an exact reference
        r = _get(doc, "order", f"sparse_{n}_{topics}")
        if r and "weight_ratio" in r:
            return [f"sparse tree, {n:,} chunks, {topics:,} fine topics",
                    f"{r['order_s']:.2f} s, recall@16 {r['recall']:.3f}", "the exact tree",
                    f"{100 * r['weight_ratio']:.3f}% of its weight"]
    return None


def _topk(doc: dict[str, Any]) -> list[str] | None:
    r = _get(doc, "topk", "centres_search")
    return r and [f"top-16 neighbours of {r['n']:,} chunks", f"{r['ours_search_s']:.2f} s, recall {r['ours_centres_recall']:.3f}",
                  f"faiss IndexIVFFlat, same centres and probes {r['ivf_s']:.2f} s, recall {r['ivf_recall']:.3f}",
                  f"{r['ivf_s'] / r['ours_search_s']:.1f}× faster"]


def _select(doc: dict[str, Any]) -> list[str] | None:
    r = _get(doc, "select", "many")
    if not r or "n" not in r:
        return None
    ours, ref = r["chunktree"], r["faiss"]
    return [f"K-means, n = {r['n']:,}, K = {r['k']:,}", f"{ours['s']:.1f} s", f"faiss.Kmeans {ref['s']:.1f} s",
            f"{ref['s'] / ours['s']:.2f}× faster, inertia {100 * (ours['inertia'] / ref['inertia'] - 1):+.2f}%"]


COMPETITORS = {"st-openvino": "sentence-transformers, OpenVINO backend", "st-bf16": "sentence-transformers, PyTorch bf16 autocast",
               "st-fp32": "sentence-transformers, PyTorch fp32", "fastembed": "fastembed, same ONNX graph"}


def _embed(doc: dict[str, Any]) -> list[str] | None:
    ours, choice = _get(doc, "embed", "chunktree_b16"), _get(doc, "embed", "chunktree_choice")
    refs = [(name, _get(doc, "embed", f"{name}_b16")) for name in COMPETITORS]
    refs = [(name, r) for name, r in refs if r]
    if not ours or not choice or not refs:
        return None
    name, ref = max(refs, key=lambda item: item[1]["per_s"])  # the fastest competitor measured
    return ["embed 256-token chunks, batch 16", f"{choice} {ours['per_s']:.1f} chunks/s",
            f"{COMPETITORS[name]} {ref['per_s']:.1f} chunks/s (the fastest competitor measured)",
            f"{ours['per_s'] / ref['per_s']:.2f}×"]


def _serve(doc: dict[str, Any]) -> list[str] | None:
    http, floor = _get(doc, "serve", "batched/1"), _get(doc, "serve", "in_process")
    return http and floor and ["`/v1/embeddings`, one sentence, 1 client", f"p50 {http['p50'] * 1e3:.2f} ms over HTTP",
                               f"in-process p50 {floor['p50'] * 1e3:.2f} ms", f"+{(http['p50'] - floor['p50']) * 1e3:.2f} ms"]


def _order_10m(doc: dict[str, Any]) -> list[str] | None:
    runs = _get(doc, "order")
    if not runs:
        return None
    run = max(runs.values(), key=lambda r: r["n"])
    grain = f"{run.get('topics', 100):,} {'small topics' if run.get('shape') == 'topics' else 'text-like topics'}"
    return [f"order {run['n']:,} embedded float16 chunks in {grain} (sparse tree), one process",
            f"{run['wall_s']:,.0f} s, peak {run['peak_rss_mb'] / 1024:.1f} GiB", "—",
            f"recall@16 {run['params']['recall_estimate']:.3f} (256 rows against all n)"]


def _eval(kind: str) -> Callable[[dict[str, Any]], list[str] | None]:
    def row(doc: dict[str, Any]) -> list[str] | None:
        block = _get(doc, "eval", "hotpot", "summary", kind)
        if not block:
            return None
        ours, dense = block["orders"][_get(doc, "eval", "default") or "dense_tree"], block["orders"]["dense"]
        diff = ours["later_gold - dense"]
        return [f"HotpotQA {kind} questions ({block['questions']}): where the later gold paragraph comes (0 first, 1 last)",
                f"default order {ours['later_gold']['mean']:.3f}", f"dense retrieval order {dense['later_gold']['mean']:.3f}",
                f"{diff['mean']:+.3f} [{diff['lo']:+.3f}, {diff['hi']:+.3f}]"]
    return row


HEADLINE: list[tuple[str, Callable[[dict[str, Any]], list[str] | None]]] = [
    ("bench_order", _naive), ("bench_order", _exact), ("bench_order", _sparse), ("bench_order_10m", _order_10m),
    ("bench_topk", _topk), ("bench_select", _select), ("bench_embed", _embed), ("bench_serve", _serve),
    ("bench_eval", _eval("bridge")), ("bench_eval", _eval("comparison"))]


def machine_line(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    flags = ", ".join(m["cpu_flags"]) or "none of the listed"
    return f"{m['cpu']}, {m['usable_cores']} cores, {m['memory_gib']} GiB; flags {flags}"


def provenance(doc: dict[str, Any]) -> str:
    commit = (doc["commit"] or "unknown")[:10] + (" with uncommitted changes" if doc["dirty"] else "")
    return f"`{doc['command']}`, {doc['date']}, commit `{commit}`"


def _row(docs: dict[str, dict[str, Any]], suite: str, fn: Callable[[dict[str, Any]], list[str] | None]
         ) -> tuple[dict[str, Any], list[str]] | None:
    """The row from the suite's run at the largest settings that has the case."""
    for doc in reversed(_runs(docs, suite)):
        cells = fn(doc)
        if cells:
            return doc, cells
    return None


def cpu(doc: dict[str, Any]) -> str:
    """The CPU a row was measured on, as its cell names it."""
    m = doc["machine"]
    return f"{m['cpu']}{' (AMX)' if 'amx_tile' in m['cpu_flags'] else ''}"


def headline(docs: dict[str, dict[str, Any]]) -> str:
    rows = [row for suite, fn in HEADLINE for row in [_row(docs, suite, fn)] if row]
    lines = [START, "", "| measured | chunktree | reference, same run | comparison | CPU |", "|---|---|---|---|---|"]
    lines += [f"| {' | '.join(cells)} | {cpu(doc)} |" for doc, cells in rows]
    machines = sorted({f"{cpu(doc)}: {machine_line(doc)}" for doc, _ in rows})
    lines += ["", f"Each row was measured on the CPU its last column names ({'; '.join(machines) or 'no machine yet'}); "
              "each row's command, date and commit are on the [benchmark page](docs/benchmarks.md).", "", END]
    return "\n".join(lines)


def _anchor(heading: str) -> str:
    """The id Python-Markdown's toc gives a heading: lower case, runs of spaces and hyphens as one."""
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", heading).strip().lower())


def _summary_line(line: str) -> str:
    """A summary line as a list item; Markdown table rows, bold captions and blank lines as they are."""
    return line if not line.strip() or line.startswith(("|", "**")) else f"- {line.strip()}"


def page(docs: dict[str, dict[str, Any]]) -> str:
    out = ["# Benchmarks", "",
           "Every figure on this page is rendered by `python bench/render.py` from the results files in "
           "`bench/results/`, which each benchmark writes when it runs. A comparison is between rows of one "
           "run: a benchmark measures chunktree and its reference side by side, on the same data.", "",
           "To measure your own machine: `pip install \".[bench]\"`, run one suite at a time with nothing else "
           "heavy running (`python -m pytest bench/bench_order.py`), then `python bench/render.py`.", "",
           "## Machines", "", "| suite | machine | BLAS | run |", "|---|---|---|---|"]
    for stem, doc in docs.items():
        out.append(f"| [{stem}](#{_anchor(stem)}) | {machine_line(doc)} | {', '.join(doc['machine']['blas'])} "
                   f"| {doc['date']} |")
    for stem, doc in docs.items():
        versions = ", ".join(f"{k} {v}" for k, v in doc["versions"].items())
        out += ["", f"## {stem}", "", doc["title"], "", f"Run: {provenance(doc)}.", "", f"Versions: {versions}.", ""]
        lines = [_summary_line(line) for line in doc["summary"]] or ["- (no summary lines)"]
        for line in lines:  # a table stands between blank lines, or Markdown reads it as text
            if line and out[-1] and line.startswith("|") != out[-1].startswith("|"):
                out.append("")
            out.append(line)
    if not docs:
        out += ["", "No results yet."]
    return "\n".join(out) + "\n"


def with_headline(readme: str, table: str) -> str:
    if START not in readme or END not in readme:
        raise SystemExit(f"{README}: the markers {START!r} and {END!r} are missing")
    head, rest = readme.split(START, 1)
    return head + table + rest.split(END, 1)[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed pages differ from the results")
    args = parser.parse_args(argv)
    docs = load()
    want = {PAGE: page(docs), README: with_headline(README.read_text(encoding="utf-8"), headline(docs))}
    stale = [path for path, text in want.items() if not path.is_file() or path.read_text(encoding="utf-8") != text]
    if args.check:
        for path in stale:
            print(f"{path.relative_to(ROOT)} differs from what bench/results renders: run python bench/render.py",
                  file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(want[path], encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

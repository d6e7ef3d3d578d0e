"""Pictures of what chunktree decided (``pip install "chunktree[plot]"``): plotly for HTML that
works offline (plotly's JavaScript inlined in the file), matplotlib for PNG.

- ``tree_figure(result)``: the Chow-Liu tree of an ``OrderResult`` drawn as a tree, root at the
  top: nodes numbered by reading position and coloured by source document, edges shaded by
  similarity (darker: more similar), the root a star and the query a diamond above it; hovering a
  node shows its text, provenance, parent and similarities. ``tree_png`` draws the same with
  matplotlib.
- ``clusters_figure(result)``: the chunks of a ``SelectResult`` in two dimensions (their first
  two principal components: numpy only), coloured by cluster, representatives as stars, cluster
  sizes in the hover and, up to ``LABELLED_CLUSTERS`` clusters, at each cluster's middle.
  ``clusters_png`` draws the same.
- ``eval_html(result, report)``: for the first questions of an ``evaluate_orders`` result, where
  each order puts the gold paragraphs (a strip per order), with the report's tables.

Level of detail: up to ``MAX_NODES`` chunks (10,000) are drawn, with WebGL markers past
``WEBGL_FROM`` (the page stays responsive); a larger tree is drawn for its first ``MAX_NODES``
chunks in reading order (a chunk whose parent is not drawn hangs from the top row), a larger
selection for its representatives and a seeded sample of the other chunks. Reading positions are
printed on the nodes up to ``LABELLED_NODES`` chunks; beyond that they are in the hover.
"""

from __future__ import annotations

import html
import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from chunktree.checks import InvalidValueError, MissingExtraError, positive_int
from chunktree.engine.chunking import Chunk
from chunktree.files import replacing

MAX_NODES = 10_000
WEBGL_FROM = 2_000
LABELLED_NODES = 150
LABELLED_CLUSTERS = 50
SOURCE_COLOURS = 20  # sources with a colour of their own (the most frequent); the rest share grey
EDGE_SHADES = ((0.0, "#d9d9d9"), (0.25, "#b0b0b0"), (0.5, "#7a7a7a"), (0.75, "#3d3d3d"))
OTHER = "#9e9e9e"
# D3's ten categorical colours, then their light variants (matplotlib's tab20 order).
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7",
           "#dbdb8d", "#9edae5")
EVAL_QUESTIONS = 8  # questions drawn by eval_figure


def _plotly() -> Any:
    try:
        import plotly.graph_objects as go
    except ImportError as exc:
        raise MissingExtraError('HTML pictures need plotly: pip install "chunktree[plot]"') from exc
    return go


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MissingExtraError('PNG pictures need matplotlib: pip install "chunktree[plot]"') from exc
    return plt


def check_available(html: bool = True, png: bool = True) -> None:
    """Raise ``MissingExtraError`` now, before any work, when a library the pictures need is missing."""
    if html:
        _plotly()
    if png:
        _pyplot()


def _palette(n: int) -> list[str]:
    """``n`` colours, cycling through ``PALETTE``."""
    return [PALETTE[i % len(PALETTE)] for i in range(n)]


def _describe(item: Any, chunk: int, width: int = 80, limit: int = 400) -> str:
    """Hover text of one chunk: its provenance and the start of its text, HTML-escaped."""
    lines = [f"chunk #{chunk}"]
    if isinstance(item, Chunk):
        where = f"{item.source} [{item.start}:{item.end}]"
        where += f" page {item.page}" if item.page is not None else ""
        lines.append(html.escape(where))
        if item.heading:
            lines.append(html.escape(f"heading: {item.heading}"))
        body = item.text
    else:
        body = item if isinstance(item, str) else ""
    flat = " ".join(body.split())
    flat = flat[:limit] + ("…" if len(flat) > limit else "")
    lines += [html.escape(line) for line in textwrap.wrap(flat, width)]
    return "<br>".join(lines)


def _source_groups(items: Any, nodes: np.ndarray) -> list[tuple[str, list[int], str]]:
    """(source name, indices into ``nodes``, colour) per legend entry: a colour of its own for
    each of the ``SOURCE_COLOURS`` most frequent sources, grey "other sources" for the rest."""
    if items is None or not isinstance(items[0], Chunk):
        return [("chunks", list(range(nodes.size)), PALETTE[0])]
    raw = [items[i].source for i in nodes.tolist()]
    names, counts = np.unique(raw, return_counts=True)
    top = [str(s) for s in names[np.argsort(-counts, kind="stable")][:SOURCE_COLOURS]]
    members: dict[str, list[int]] = {name: [] for name in top + ["other sources"]}
    for i, s in enumerate(raw):
        members[s if s in members else "other sources"].append(i)
    colours = {**dict(zip(top, _palette(len(top)))), "other sources": OTHER}
    return [(name, m, colours[name]) for name, m in members.items() if m]


def tree_layout(parent: np.ndarray, nodes: np.ndarray, position: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x, y of each of ``nodes`` in a tidy top-down drawing of the tree (or forest) they form:
    y is minus the depth; leaves sit one unit apart in depth-first order (children by reading
    position), a parent midway over its first and last child. A node whose parent is not among
    ``nodes`` starts a tree of its own, side by side in reading order."""
    index = {int(v): i for i, v in enumerate(nodes.tolist())}
    kids: list[list[int]] = [[] for _ in nodes]
    tops = []
    for i, v in enumerate(nodes.tolist()):
        p = int(parent[v])
        if p >= 0 and p in index:
            kids[index[p]].append(i)
        else:
            tops.append(i)
    for k in kids:
        k.sort(key=lambda i: position[nodes[i]])
    tops.sort(key=lambda i: position[nodes[i]])
    x = np.zeros(nodes.size)
    y = np.zeros(nodes.size)
    preorder: list[int] = []
    stack = [(t, 0) for t in reversed(tops)]
    leaf = 0
    while stack:  # depth-first, iterative: Chow-Liu trees can be thousands deep
        i, depth = stack.pop()
        y[i] = -depth
        preorder.append(i)
        if kids[i]:
            stack.extend((c, depth + 1) for c in reversed(kids[i]))
        else:
            x[i] = leaf
            leaf += 1
    for i in reversed(preorder):
        if kids[i]:
            x[i] = (x[kids[i][0]] + x[kids[i][-1]]) / 2
    return x, y


def _drawn_tree(result: Any, max_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    if result.parent is None:
        raise InvalidValueError(f"strategy {result.strategy!r} builds no tree to draw; use a tree strategy "
                                "(bfs, dfs, guided, dense_tree, runs)")
    positive_int(max_nodes, "max_nodes")
    nodes = result.order[:max_nodes].astype(np.int64)
    position = np.empty(result.order.size, np.int64)
    position[result.order] = np.arange(result.order.size)
    return nodes, position


def _tree_edges(result: Any, nodes: np.ndarray) -> list[tuple[int, int]]:
    """(child, parent) index pairs into ``nodes`` of the tree edges among the drawn nodes."""
    index = {int(v): i for i, v in enumerate(nodes.tolist())}
    return [(i, index[int(result.parent[v])]) for i, v in enumerate(nodes.tolist())
            if result.parent[v] >= 0 and int(result.parent[v]) in index]


def tree_figure(result: Any, max_nodes: int = MAX_NODES) -> Any:
    """The plotly figure of an ``OrderResult``'s tree (see the module notes)."""
    go = _plotly()
    nodes, position = _drawn_tree(result, max_nodes)
    x, y = tree_layout(result.parent, nodes, position)
    edges = _tree_edges(result, nodes)
    fig = go.Figure()
    trace = go.Scattergl if nodes.size > WEBGL_FROM else go.Scatter  # WebGL keeps large pages responsive
    sims = np.array([result.parent_similarity[nodes[c]] for c, _ in edges], dtype=np.float64)
    for b, (low, colour) in enumerate(EDGE_SHADES):
        high = EDGE_SHADES[b + 1][0] if b + 1 < len(EDGE_SHADES) else np.inf
        pick = [e for e, s in zip(edges, sims) if (low <= s < high) or (b == 0 and s < low)]
        if not pick:
            continue
        ex = [v for c, p in pick for v in (x[c], x[p], None)]
        ey = [v for c, p in pick for v in (y[c], y[p], None)]
        label = f"similarity ≥ {low:.2f}" if b else f"similarity < {EDGE_SHADES[1][0]:.2f}"
        fig.add_trace(trace(x=ex, y=ey, mode="lines", line={"color": colour, "width": 1.5}, hoverinfo="skip",
                            name=f"edge, {label}", legendgroup="edges"))
    labelled = nodes.size <= LABELLED_NODES
    for name, members, colour in _source_groups(result.items, nodes):
        hover = []
        for i in members:
            v = int(nodes[i])
            item = None if result.items is None else result.items[v]
            lines = [f"<b>{position[v] + 1}. in reading order</b>", _describe(item, v)]
            p = int(result.parent[v])
            lines.append("root" if p < 0 else f"tree parent #{p}, similarity {result.parent_similarity[v]:.3f}")
            if result.query_similarity is not None:
                lines.append(f"query similarity {result.query_similarity[v]:.3f}")
            hover.append("<br>".join(lines))
        fig.add_trace(trace(
            x=x[members], y=y[members], mode="markers+text" if labelled else "markers", name=name,
            text=[str(position[nodes[i]] + 1) for i in members] if labelled else None, textposition="middle center",
            textfont={"size": 9, "color": "white"}, customdata=nodes[members], hovertext=hover, hoverinfo="text",
            marker={"size": 18 if labelled else 5, "color": colour, "line": {"width": 0.5, "color": "white"}}))
    r = int(np.flatnonzero(nodes == result.root)[0])
    fig.add_trace(go.Scatter(x=[x[r]], y=[y[r]], mode="markers", name="root (read first)", hoverinfo="skip",
                             marker={"symbol": "star", "size": 26, "color": "rgba(0,0,0,0)",
                                     "line": {"width": 2, "color": "#d62728"}}))
    if result.query is not None:
        fig.add_trace(go.Scatter(x=[x[r], x[r]], y=[y[r] + 1, y[r]], mode="lines", line={"dash": "dot", "color": "#d62728"},
                                 hoverinfo="skip", showlegend=False))
        fig.add_trace(go.Scatter(x=[x[r]], y=[y[r] + 1], mode="markers", name="query", hoverinfo="text",
                                 hovertext=["<b>query</b><br>" + "<br>".join(html.escape(t) for t in
                                                                             textwrap.wrap(result.query, 80))],
                                 marker={"symbol": "diamond", "size": 16, "color": "#d62728"}))
    shown = f"first {nodes.size:,} of {result.order.size:,} chunks" if nodes.size < result.order.size else \
        f"{nodes.size:,} chunks"
    fig.update_layout(
        title=f"Chow-Liu tree ({shown}; strategy {result.strategy}, tree weight {result.tree_weight:.2f})",
        template="plotly_white", hovermode="closest", legend={"itemsizing": "constant"},
        xaxis={"visible": False}, yaxis={"visible": False}, margin={"l": 20, "r": 20, "t": 60, "b": 20})
    return fig


def tree_png(result: Any, path: str | Path, max_nodes: int = MAX_NODES) -> Path:
    """Write the tree of an ``OrderResult`` as a PNG (matplotlib); returns the path."""
    plt = _pyplot()
    from matplotlib.collections import LineCollection

    nodes, position = _drawn_tree(result, max_nodes)
    x, y = tree_layout(result.parent, nodes, position)
    edges = _tree_edges(result, nodes)
    width = float(np.clip(x.max() * 0.35 + 4, 8, 40)) if nodes.size else 8.0
    height = float(np.clip(-y.min() * 0.5 + 3, 5, 40)) if nodes.size else 5.0
    fig, ax = plt.subplots(figsize=(width, height), dpi=100)
    if edges:
        segments = [((x[c], y[c]), (x[p], y[p])) for c, p in edges]
        sims = np.array([result.parent_similarity[nodes[c]] for c, _ in edges])
        lines = LineCollection(segments, cmap="Greys", norm=plt.Normalize(0.0, 1.0), linewidths=1.2, zorder=1)
        lines.set_array(np.clip(sims, 0.1, 1.0))
        ax.add_collection(lines)
        fig.colorbar(lines, ax=ax, shrink=0.5, label="edge similarity")
    labelled = nodes.size <= LABELLED_NODES
    for name, members, colour in _source_groups(result.items, nodes):
        ax.scatter(x[members], y[members], s=140 if labelled else 12, c=colour, label=name, zorder=2,
                   edgecolors="white", linewidths=0.5)
    if labelled:
        for i, v in enumerate(nodes.tolist()):
            ax.annotate(str(position[v] + 1), (x[i], y[i]), ha="center", va="center", fontsize=7, color="white",
                        zorder=3)
    r = int(np.flatnonzero(nodes == result.root)[0])
    ax.scatter([x[r]], [y[r]], s=500 if labelled else 120, marker="*", facecolors="none", edgecolors="#d62728",
               linewidths=1.5, zorder=4, label="root (read first)")
    if result.query is not None:
        ax.plot([x[r], x[r]], [y[r] + 1, y[r]], ls=":", c="#d62728", zorder=1)
        ax.scatter([x[r]], [y[r] + 1], s=90, marker="D", c="#d62728", zorder=4, label="query")
    ax.set_title(f"Chow-Liu tree of {nodes.size:,} chunks (strategy {result.strategy})")
    ax.axis("off")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    return _save(fig, path)


def _drawn_clusters(result: Any, max_nodes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The chunks drawn (every representative, then a seeded sample of the rest up to
    ``max_nodes``) and their 2-D principal-component coordinates."""
    if result.vectors is None:
        raise InvalidValueError("this SelectResult holds no vectors to project (it was built by hand)")
    positive_int(max_nodes, "max_nodes")
    n = result.labels.size
    reps = np.array(result.representatives, dtype=np.int64)
    if n <= max_nodes:
        nodes = np.arange(n, dtype=np.int64)
    else:
        rest = np.setdiff1d(np.arange(n), reps)
        room = max(max_nodes - reps.size, 0)
        pick = np.random.default_rng(seed).choice(rest, min(room, rest.size), replace=False)
        nodes = np.sort(np.concatenate([reps, pick]))
    x = np.asarray(result.vectors[nodes], dtype=np.float64)
    x -= x.mean(axis=0)
    if nodes.size < 2:
        return nodes, np.zeros((nodes.size, 2))
    _, _, vt = np.linalg.svd(x, full_matrices=False)
    xy = x @ vt[:2].T
    if xy.shape[1] < 2:
        xy = np.column_stack([xy, np.zeros(nodes.size)])
    return nodes, xy


def clusters_figure(result: Any, max_nodes: int = MAX_NODES, seed: int = 0) -> Any:
    """The plotly figure of a ``SelectResult`` (see the module notes)."""
    go = _plotly()
    nodes, xy = _drawn_clusters(result, max_nodes, seed)
    labels = result.labels[nodes]
    sizes = np.array([c.size for c in result.clusters])
    colours = np.array(_palette(len(result.clusters)))
    reps = set(result.representatives)
    hover = [f"<b>cluster #{labels[i]} ({sizes[labels[i]]} chunks)</b>"
             f"{' · representative' if int(v) in reps else ''}<br>"
             + _describe(None if result.items is None else result.items[v], int(v)) for i, v in enumerate(nodes)]
    is_rep = np.array([int(v) in reps for v in nodes])
    scatter = go.Scattergl if nodes.size > WEBGL_FROM else go.Scatter
    fig = go.Figure()
    for name, mask, marker in (
            ("chunks", ~is_rep, {"size": 6, "opacity": 0.7}),
            ("representatives", is_rep, {"size": 16, "symbol": "star", "line": {"width": 1, "color": "black"}})):
        fig.add_trace(scatter(x=xy[mask, 0], y=xy[mask, 1], mode="markers", name=name, customdata=nodes[mask],
                              hovertext=[h for h, m in zip(hover, mask) if m], hoverinfo="text",
                              marker={**marker, "color": colours[labels[mask]].tolist()}))
    if len(result.clusters) <= LABELLED_CLUSTERS:
        for c in range(len(result.clusters)):
            here = labels == c
            if here.any():
                fig.add_annotation(x=float(xy[here, 0].mean()), y=float(xy[here, 1].mean()), showarrow=False,
                                   text=f"#{c}: {sizes[c]}", font={"size": 11, "color": colours[c]},
                                   bgcolor="rgba(255,255,255,0.7)")
    n = result.labels.size
    shown = f"{nodes.size:,} of {n:,} chunks" if nodes.size < n else f"{n:,} chunks"
    fig.update_layout(title=f"{len(result.clusters)} clusters of {shown} (first two principal components; "
                            "label: #cluster: size, ids from 0 as in the text)", template="plotly_white",
                      hovermode="closest",
                      xaxis={"title": "PC 1", "zeroline": False}, yaxis={"title": "PC 2", "zeroline": False})
    return fig


def clusters_png(result: Any, path: str | Path, max_nodes: int = MAX_NODES, seed: int = 0) -> Path:
    """Write the clusters of a ``SelectResult`` as a PNG (matplotlib); returns the path."""
    plt = _pyplot()
    nodes, xy = _drawn_clusters(result, max_nodes, seed)
    labels = result.labels[nodes]
    colours = np.array(_palette(len(result.clusters)))
    chosen = set(result.representatives)
    reps = np.array([int(v) in chosen for v in nodes])
    fig, ax = plt.subplots(figsize=(9, 7), dpi=100)
    ax.scatter(xy[~reps, 0], xy[~reps, 1], s=10, c=colours[labels[~reps]].tolist(), alpha=0.7, label="chunks")
    ax.scatter(xy[reps, 0], xy[reps, 1], s=160, marker="*", c=colours[labels[reps]].tolist(), edgecolors="black",
               linewidths=0.8, label="representatives")
    if len(result.clusters) <= LABELLED_CLUSTERS:
        for c, cluster in enumerate(result.clusters):
            here = labels == c
            if here.any():
                ax.annotate(f"#{c}: {cluster.size}", (xy[here, 0].mean(), xy[here, 1].mean()), fontsize=8,
                            color=colours[c], ha="center", bbox={"fc": "white", "alpha": 0.7, "lw": 0})
    ax.set_xlabel("PC 1")
    ax.set_ylabel("PC 2")
    ax.set_title(f"{len(result.clusters)} clusters of {result.labels.size:,} chunks (label: #cluster: size, ids from "
                 "0 as in the text)")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def _save(fig: Any, path: str | Path) -> Path:
    """Write a matplotlib figure in the format its suffix names, and close it."""
    import matplotlib.pyplot as plt

    path = Path(path)
    try:
        check_picture_path(path)
        with replacing(path, "wb") as f:
            fig.savefig(f, format=path.suffix[1:].lower())
    finally:
        plt.close(fig)
    return path


def check_picture_path(path: str | Path) -> None:
    """``InvalidValueError`` unless matplotlib writes the format that ``path``'s suffix names."""
    _pyplot()
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = Path(path).suffix[1:].lower()
    if suffix not in formats:
        raise InvalidValueError(f"{path}: a picture's suffix names its format; got {suffix or 'none'!r}, allowed: "
                                f"{', '.join(sorted(formats))}")


def eval_figure(result: dict[str, Any], questions: int = EVAL_QUESTIONS) -> Any:
    """Where each order puts the gold paragraphs, for the first ``questions`` questions of an
    ``evaluate_orders`` result: per question a strip per order, the passage's reading positions
    from first (left) to last, the gold paragraphs as diamonds."""
    go = _plotly()
    positive_int(questions, "questions")
    records = result["records"][:questions]
    if not records:
        raise InvalidValueError("the evaluation holds no questions to draw")
    orders = list(result["orders"])
    colours = dict(zip(orders, _palette(len(orders))))
    fig = go.Figure()
    rows: list[str] = []
    for qi, record in enumerate(records):
        n = record["paragraphs"]
        for name in orders:
            row = f"Q{qi + 1} · {name}"
            rows.append(row)
            fig.add_trace(go.Scatter(x=[1, n], y=[row, row], mode="lines", line={"color": "#e0e0e0", "width": 6},
                                     hoverinfo="skip", showlegend=False))
            gold = [g + 1 for g in record["orders"][name]["gold"]]
            fig.add_trace(go.Scatter(
                x=gold, y=[row] * len(gold), mode="markers", name=name, legendgroup=name, showlegend=qi == 0,
                marker={"symbol": "diamond", "size": 11, "color": colours[name]}, hoverinfo="text",
                hovertext=[f"Q{qi + 1}: {html.escape(record['question'])}<br>{name}: gold paragraph read "
                           f"{g} of {n}" for g in gold]))
    fig.update_layout(
        title="Where each order puts the gold paragraphs (1: read first)", template="plotly_white",
        height=max(300, 22 * len(rows) + 120), hovermode="closest",
        xaxis={"title": "reading position", "rangemode": "tozero"},
        yaxis={"categoryorder": "array", "categoryarray": rows[::-1], "tickfont": {"size": 10}})
    return fig


def eval_html(result: dict[str, Any], report: str, path: str | Path, questions: int = EVAL_QUESTIONS) -> Path:
    """One HTML page that opens offline: ``eval_figure``, the questions drawn, and the report's
    tables under them (``report``: the text ``format_report`` makes)."""
    fig = eval_figure(result, questions)
    asked = "".join(f"<li>{html.escape(r['question'])} ({r['kind']}, {r['paragraphs']} paragraphs)</li>"
                    for r in result["records"][:questions])
    page = ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>chunktree eval-order</title>"
            "<style>body{font-family:sans-serif;margin:1em} pre{font-size:12px;overflow-x:auto}</style></head><body>"
            f"<h2>chunktree eval-order</h2>{fig.to_html(include_plotlyjs=True, full_html=False)}"
            f"<h3>Questions drawn</h3><ol>{asked}</ol><h3>All questions</h3><pre>{html.escape(report)}</pre>"
            "</body></html>")
    path = Path(path)
    with replacing(path) as f:
        f.write(page)
    return path


def write_html(fig: Any, path: str | Path) -> Path:
    """Write a plotly figure as one self-contained HTML file (plotly's JavaScript inlined: it
    opens offline); returns the path."""
    path = Path(path)
    with replacing(path) as f:
        fig.write_html(f, include_plotlyjs=True, full_html=True)
    return path

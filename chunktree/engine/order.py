"""CL-ORDER: the processing order of chunks for a sequential reader, from their Chow-Liu tree.

1. Similarity: cosine of L2-normalised chunk embeddings.
2. Tree: the maximum spanning tree of the complete similarity graph — exact (dense Prim's) or,
   for large n, sparse: the maximum spanning forest of an approximate top-K neighbour graph
   (inverted-file search around spherical K-means centres, done as matrix products), its components
   joined by their best cross-component edges into one spanning tree.
3. Root: the chunk most similar to the query; without a query, the most central chunk (highest
   mean similarity to all chunks, which for unit vectors is ``x_i . mean(x)``); or the caller's.
4. Traversal of the tree from the root:
   - ``"bfs"`` (CL-ORDER) or ``"dfs"``: children by descending edge weight, ties by query
     similarity, then document position;
   - ``"guided"``: best-first — each step reads, among the children of what was read, the one
     with the highest ``blend * edge weight + (1 - blend) * query similarity``;
   - ``"dense_tree"``: dense order, each chunk followed at once by its tree neighbours not read
     yet (by descending edge weight), so what a relevant chunk depends on comes right after it;
     without a query, chunks are ranked by centrality (similarity to the mean) instead.
   - ``"runs"``: the query ranking decides, and a tree edge is followed only where it is strong
     against what the ranking offers next (``runs_keys``): the chunks within ``RUNS_HEAD`` of the
     best query similarity come first, by the query; then each step reads the best unread chunk by
     its query similarity (as a z-score among the chunks), unless a tree edge from a chunk already
     read is stronger (the edge's weight as a z-score among the tree's edges, less
     ``RUNS_STRENGTH``); chunks more than ``RUNS_TAIL`` below the best are reached only through the
     tree, so the rest of the corpus is read a topic's subtree at a time.
Baselines: ``"document"`` (input order) and ``"dense"`` (descending query similarity).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from chunktree.checks import SEED_MAX, InvalidValueError, integer, number, one_of, optional_positive_int, text
from chunktree.engine.cache import EmbeddingCache
from chunktree.engine.chunking import Chunk
from chunktree.engine.embedding import EmbedStats
from chunktree.engine.inputs import prepare
from chunktree.engine.memory import StageMeter, check_budget, planned_peak_bytes
from chunktree.engine.results import chunk_fields, dumps, json_float
from chunktree.kernels import bf16 as bf16_units
from chunktree.kernels.forest import max_spanning_forest, orient_tree
from chunktree.kernels.join import join_components
from chunktree.kernels.kmeans import spherical_kmeans
from chunktree.kernels.prim import prim_max_spanning_tree
from chunktree.kernels.rows import dot_rows, f32, row_sum
from chunktree.kernels.similarity import similarity_matrix
from chunktree.kernels.topk import (
    Blocks,
    exact_sims_of_rows,
    fresh_entries,
    recall_of_rows,
    refine_with_neighbours_of_neighbours,
    topk_clustered,
    with_reverse,
)
from chunktree.kernels.traversal import (
    best_first_order,
    bfs_order,
    children_csr,
    dfs_order,
    pull_neighbours_order,
    runs_order,
)
from chunktree.progress import Progress, say
from chunktree.progress import progress as progress_counter

log = logging.getLogger(__name__)

STRATEGIES = ("bfs", "dfs", "guided", "dense_tree", "runs", "document", "dense")
NEEDS_QUERY = ("dense",)
# The default, chosen on bench/bench_eval.py (eval-order on the shared HotpotQA and SQuAD-Shifts sets)
# and bench/eval_runs.py (topics read as runs on topic-labelled corpora).
DEFAULT_STRATEGY = "runs"
DEFAULT_BLEND = 0.5
# "runs": cosine gaps below the best query similarity (all-MiniLM-L6-v2's scale) and the edge
# strength in z units, chosen on the shared HotpotQA and SQuAD-Shifts sets and topic-labelled
# corpora (bench/eval_runs.py).
RUNS_HEAD = 0.35
RUNS_TAIL = 0.4
RUNS_STRENGTH = 0.5
METHODS = ("auto", "exact", "sparse")
# "auto" takes the exact path up to this many chunks. The exact path holds one n x n float32
# matrix (4 n^2 bytes); bench/bench_order.py measures the time and memory behind the bound.
EXACT_MAX_N = 20_000
DEFAULT_K = 16
DEFAULT_PROBES = 16
KMEANS_ITERATIONS = 10
# The sparse method's neighbour lists: recall estimated on this many rows against exact neighbours,
# refined while below the target (bench/bench_order.py, the fine-topic cases).
RECALL_SAMPLE = 256
REFINE_TARGET = 0.99
MAX_REFINE_PASSES = 4
REFINE_MIN_GAIN = 0.01
# Reverse neighbours in a refinement pass's graph rows, the most similar first. Chosen on
# bench/bench_order.py test_sparse, n = 50,000, 2,500 topics (tree weight against exact, time):
# more add refinement time for a weight gain below 0.01%.
REVERSE_NEIGHBOURS = 8
# Spare edges per row of a small component searched by the join (``join_components``), for the
# last Kruskal pass. Chosen on the same case.
JOIN_PER_ROW = 4
# From EXACT_MAX_N rows up, a probed cluster whose centre is more than PROBE_GAP below the nearest
# centre in cosine is not searched: on clear topics it halves the probes for a recall@16 loss of
# about 0.001, on fine topics it keeps nearly all of them (bench/bench_order.py, bench_topk.py).
# Below EXACT_MAX_N the centres, each from few rows, are too rough to judge by.
PROBE_GAP = 0.1
# The search multiplies on the bf16 units where its clusters average at least this many rows: its
# products are then large enough to outweigh the conversions and the float32 recomputations
# (bench/bench_products.py, bench/bench_order_10m.py). K-means' products gain at any size.
BF16_SEARCH_MIN_ROWS = 1000
# From this many embeddings, ``order(progress=True)`` says the planned peak memory before it starts.
PLAN_SAID_N = 1_000_000
ROWS_AT_ONCE = 65_536  # rows of an order's output made at a time (``OrderResult.write_json``)
# With progress, a stage after the search that takes this many seconds says so in a line.
STAGE_LINE_S = 2.0


@dataclass(frozen=True)
class OrderResult:
    """A processing order and the tree behind it.

    Attributes
    ----------
    order
        int64 (n,), chunk indices in reading order.
    root
        the first chunk.
    parent
        int64 (n,), each chunk's parent in the tree, -1 for the root; None for baselines.
    parent_similarity
        float32 (n,), similarity to the parent (NaN for the root); None for baselines.
    query_similarity
        float32 (n,), similarity of each chunk to the query; None without a query.
    tree_weight
        sum of the tree's edge similarities (NaN for baselines).
    strategy, method
        what was used.
    params
        the parameters that decided the result (n, dims, ``duplicates``: chunks that repeat an
        earlier one exactly, and the sparse method's k,
        n_clusters, probes, seed, recall_estimate and refine_passes (``sparse_neighbours``), forest
        components and joining edges).
    timings
        seconds per stage (``embed_s``, ``tree_s``, ``traverse_s``, ``total_s``; for the
        sparse method also the parts of ``tree_s``: ``kmeans_s``, ``topk_s``, ``refine_s``, ``forest_s``,
        ``join_s``).
    peak_memory_mb
        peak resident memory of the process in MB during each stage of ``timings`` (``embed``,
        ``kmeans``, ..., ``traverse``; ``engine.memory.StageMeter``); empty where the platform has
        no ``/proc``.
    query
        the query when it was given as text.
    embedding
        what embedding the chunks cost (None when embeddings were given).
    items
        the chunks or strings that were ordered, or that ``order(items=)`` named for the rows of
        embeddings (else None).
    """

    order: np.ndarray
    root: int
    parent: np.ndarray | None
    parent_similarity: np.ndarray | None
    query_similarity: np.ndarray | None
    tree_weight: float
    strategy: str
    method: str
    params: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    peak_memory_mb: dict[str, float] = field(default_factory=dict)
    query: str | None = None
    embedding: EmbedStats | None = None
    items: Sequence[Chunk] | Sequence[str] | None = field(default=None, repr=False)

    def explain(self, top: int | None = None) -> list[dict[str, Any]]:
        """The first ``top`` positions (default all): the chunk, its parent, and its similarity
        to the parent and to the query (None where there is none)."""
        return list(self._explained(top))

    def _explained(self, top: int | None, block: int = ROWS_AT_ONCE) -> Iterator[dict[str, Any]]:
        """``explain``'s rows one at a time, made ``block`` positions at a time."""
        seq = self.order[:top]
        for start in range(0, seq.size, block):
            part = seq[start:start + block]
            parents = [None] * part.size if self.parent is None else self.parent[part].tolist()
            psim = [None] * part.size if self.parent_similarity is None else self.parent_similarity[part].tolist()
            qsim = [None] * part.size if self.query_similarity is None else self.query_similarity[part].tolist()
            for position, (chunk, p, ps, qs) in enumerate(zip(part.tolist(), parents, psim, qsim), start):
                yield {"position": position, "chunk": chunk, "parent": None if p is None or p < 0 else p,
                       "parent_similarity": json_float(ps), "query_similarity": qs}

    def to_html(self, path: str | Path, max_nodes: int | None = None) -> Path:
        """Write the tree as an interactive HTML page that opens offline (``engine.pictures``;
        ``chunktree[plot]``): the first ``max_nodes`` chunks in reading order (default 10,000)."""
        from chunktree.engine import pictures

        return pictures.write_html(pictures.tree_figure(self, max_nodes or pictures.MAX_NODES), path)

    def to_png(self, path: str | Path, max_nodes: int | None = None) -> Path:
        """Write the same picture of the tree as a PNG (matplotlib)."""
        from chunktree.engine import pictures

        return pictures.tree_png(self, path, max_nodes or pictures.MAX_NODES)

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        """The JSON-ready result: the whole order, and the first ``top`` chunks (default all) in
        reading order with their provenance, text, parent and similarities."""
        return {"order": self.order.tolist(), **self._head(), "chunks": list(self.rows(top))}

    def _head(self) -> dict[str, Any]:
        return {"root": self.root, "strategy": self.strategy, "method": self.method,
                "tree_weight": json_float(self.tree_weight), "query": self.query, "n_chunks": int(self.order.size),
                "params": dict(self.params), "timings": dict(self.timings), "memory_mb": dict(self.peak_memory_mb),
                "embedding": None if self.embedding is None else self.embedding.to_dict()}

    def rows(self, top: int | None = None, block: int = ROWS_AT_ONCE) -> Iterator[dict[str, Any]]:
        """``to_dict``'s chunk rows one at a time: the first ``top`` (default all) in reading order,
        made ``block`` at a time."""
        for row in self._explained(top, block):
            item = None if self.items is None else self.items[row["chunk"]]
            yield {"position": row["position"], "id": row["chunk"], **chunk_fields(item), "parent": row["parent"],
                   "parent_similarity": row["parent_similarity"], "query_similarity": row["query_similarity"]}

    def write_json(self, out: IO[str], top: int | None = None, lines: bool = False, block: int = ROWS_AT_ONCE,
                   progress: Progress = False) -> None:
        """``to_dict`` as JSON into ``out``, or (``lines``) its chunk rows as JSON Lines, written
        ``block`` rows at a time: 10 million rows take no more memory than one block. With
        ``progress``, the rows written and the time left go to stderr."""
        written = progress_counter(min(top or self.order.size, self.order.size), "order: writing", "rows",
                                   enabled=progress)
        if not lines:
            head = dumps(self._head(), indent=1)
            out.write(head[:-2] + ',\n "order": [')  # the head without its closing "\n}"
            for start in range(0, self.order.size, block):
                out.write(("," if start else "") + ",".join(map(str, self.order[start:start + block].tolist())))
            out.write('],\n "chunks": [')
        count = 0
        for count, row in enumerate(self.rows(top, block), 1):
            out.write(dumps(row) + "\n" if lines else ("," if count > 1 else "") + "\n  " + dumps(row))
            if count % block == 0:
                written.update(block)
        written.update(count % block)
        if not lines:
            out.write("\n ]\n}\n")
        written.close()


def order(
    chunks_or_embeddings: Sequence[Chunk] | Sequence[str] | np.ndarray,
    query: str | np.ndarray | None = None,
    *,
    strategy: str = DEFAULT_STRATEGY,
    root: int | None = None,
    method: str = "auto",
    k: int | None = None,
    n_clusters: int | None = None,
    probes: int | None = None,
    seed: int = 0,
    blend: float = DEFAULT_BLEND,
    embedder: Any = None,
    cache: EmbeddingCache | None = None,
    progress: Progress = False,
    ray: str | None = None,
    memory_budget_mb: float | None = None,
    items: Sequence[Chunk] | Sequence[str] | None = None,
) -> OrderResult:
    """Order chunks for a sequential reader (CL-ORDER).

    Embeddings given as float16 stay float16 (a memory-mapped ``.npy`` stays on disk, in the page
    cache) and are read as float32 a block at a time (``kernels.rows``): half the memory of
    float32 vectors.

    Parameters
    ----------
    chunks_or_embeddings
        ``Chunk`` objects or strings (embedded with ``embedder``, default the
        default model, through ``cache``), or a float array (n, d) of embeddings.
    query
        a string (embedded like the chunks) or a vector (d,); optional.
    strategy
        ``"bfs"`` (CL-ORDER), ``"dfs"``, ``"guided"``, ``"dense_tree"``, ``"runs"``, or the baselines
        ``"document"`` and ``"dense"`` (needs a query).
    root
        a chunk index to start from; default: most similar to the query, else most central.
    method
        ``"exact"`` (dense Prim's), ``"sparse"`` (top-K graph, forest, joined) or ``"auto"``
        (exact up to ``EXACT_MAX_N`` chunks, sparse beyond).
    k, n_clusters, probes, seed
        the sparse method's neighbours per chunk (default 16, capped at
        n - 1), K-means clusters (default 2 * sqrt(n)), clusters searched per chunk (default 16)
        and K-means seed.
    blend
        for ``"guided"``: the weight of the edge similarity against the query similarity
        (1: edge weight only, 0: query similarity only; without a query, edge weight only).
    progress
        show progress (True: on stderr; a callable: each line given to it, ``chunktree.progress``):
        while embedding, for K-means, the neighbour search (with the time it will take, projected
        from its first block of rows) and each refinement pass (rows done and the time left), and
        a line for each later stage that takes two seconds or more.
    ray
        run the embedding and the sparse method's top-K search on a Ray cluster
        (``chunktree[ray]``): ``"local"`` starts one on this machine, otherwise the address of a
        running one (``"auto"`` or ``HOST:PORT``). Same result as without it (``engine.distributed``).
    memory_budget_mb
        refuse a run whose planned peak memory (``engine.memory.planned_peak_bytes``) passes this
        many MB: embeddings before any work, texts once embedded (before the tree).
    items
        with embeddings given as an array: the chunks (or strings) its rows stand for, one per row,
        kept in the result for their text and provenance (``chunktree embed`` writes them beside
        the vectors; ``engine.inputs.load_embeddings`` reads both).
    """
    one_of(strategy, "strategy", STRATEGIES)
    one_of(method, "method", METHODS)
    for value, name in ((k, "k"), (n_clusters, "n_clusters"), (probes, "probes")):
        optional_positive_int(value, name)
    integer(seed, "seed", 0, SEED_MAX)
    number(blend, "blend", 0.0, 1.0)
    if ray is not None:  # joined before any work: a missing extra or a dead address fails fast
        from chunktree.engine.distributed import connect

        connect(text(ray, "ray (a Ray cluster address, or 'local')"))
    if method == "exact" and (k, n_clusters, probes) != (None, None, None):
        raise InvalidValueError("k, n_clusters and probes set the sparse method; they do not apply to "
                                "method='exact'")
    if root is not None and hasattr(chunks_or_embeddings, "__len__"):  # checked before anything is embedded
        integer(root, "root (a chunk index)", 0, max(len(chunks_or_embeddings) - 1, 0))
    elif root is not None:
        integer(root, "root (a chunk index)", 0)
    if strategy in NEEDS_QUERY and query is None:
        raise InvalidValueError(f"strategy {strategy!r} orders by query similarity and needs a query")
    if memory_budget_mb is not None:
        number(memory_budget_mb, "memory_budget_mb", 0.0, low_open=True)
    shape = getattr(chunks_or_embeddings, "shape", None)
    if items is not None:
        if shape is None or len(shape) != 2:
            raise InvalidValueError("items names the rows of embeddings given as an array (n, d); chunks or "
                                    "strings given to order are kept as they are", param="items")
        if len(items) != shape[0]:
            raise InvalidValueError(f"items must hold one chunk or string per row of the embeddings ({shape[0]:,}); "
                                    f"got {len(items):,}", param="items")
    planned = strategy in ("document", "dense")  # baselines build no tree: nothing to plan
    if not planned and shape is not None and len(shape) == 2:  # embeddings: planned before they are read
        _check_plan(chunks_or_embeddings, method, k, probes, memory_budget_mb, progress)  # type: ignore[arg-type]
        planned = True
    with StageMeter() as meter:  # its sampling thread ends with the run, or with its error
        t0 = time.perf_counter()
        inputs = prepare(chunks_or_embeddings, query, embedder=embedder, cache=cache, progress=progress, ray=ray,
                         keep_float16=True)
        timings = {"embed_s": time.perf_counter() - t0}
        meter.mark("embed")
        x, q = inputs.vectors, inputs.query
        n, d = x.shape
        if inputs.embedding is None:
            _said(progress, f"read and checked {n:,} vectors: {timings['embed_s']:.0f} s", timings["embed_s"])
        if not planned:  # texts: planned once embedded, before the tree
            _check_plan(x, method, k, probes, memory_budget_mb, progress)
        if root is not None:
            integer(root, "root (a chunk index)", 0, n - 1)
        qsim = None if q is None else dot_rows(x, q)
        params: dict[str, Any] = {"n": n, "dims": d, "duplicates": int((inputs.first_copies() != np.arange(n)).sum())}
        done: dict[str, Any] = {"query": inputs.query_text, "embedding": inputs.embedding,
                                "items": inputs.items if items is None else items}

        if strategy in ("document", "dense"):
            ids = np.arange(n, dtype=np.int64)
            seq = ids if strategy == "document" or qsim is None else np.lexsort((ids, -qsim)).astype(np.int64)
            timings["total_s"] = time.perf_counter() - t0
            return OrderResult(seq, int(seq[0]), None, None, qsim, float("nan"), strategy, "none", params,
                               timings, meter.peaks, **done)

        # to the query, else centrality (the similarity to the mean row)
        relevance = qsim if qsim is not None else dot_rows(x, (row_sum(x) / n).astype(np.float32))
        if root is None:
            root = int(np.argmax(relevance))
        if method == "auto":
            method = "exact" if n <= EXACT_MAX_N else "sparse"
        t1 = time.perf_counter()
        if method == "exact":
            parent, weight = prim_max_spanning_tree(similarity_matrix(f32(x)), np.int64(root))
            meter.mark("tree")
        else:
            parent, weight, sparse_params = _sparse_tree(x, root, k, n_clusters, probes, seed, timings, ray, meter, progress)
            params.update(sparse_params)
        timings["tree_s"] = time.perf_counter() - t1
        t2 = time.perf_counter()
        # Children by descending edge weight, then descending query similarity, then position.
        keys = (-weight, -qsim) if qsim is not None else (-weight,)
        indptr, children = children_csr(parent, *keys)
        if strategy == "guided":
            params["blend"] = blend
            priority = weight.astype(np.float64) if qsim is None else blend * weight + (1.0 - blend) * qsim
            seq = best_first_order(indptr, children, np.int64(root), priority.astype(np.float64))
        elif strategy == "runs":
            seq = runs_order(indptr, children, parent, *runs_keys(relevance, weight, parent, root))
        elif strategy == "dense_tree":
            ids = np.arange(n)
            ranking = np.lexsort((ids, -relevance, ids != root)).astype(np.int64)  # the root first, then dense
            seq = pull_neighbours_order(indptr, children, parent, weight, ranking)
        else:
            seq = (bfs_order if strategy == "bfs" else dfs_order)(indptr, children, np.int64(root))
        timings["traverse_s"] = time.perf_counter() - t2
        _said(progress, f"{strategy} traversal: {timings['traverse_s']:.0f} s", timings["traverse_s"])
        meter.mark("traverse")
        parent_sim = weight.copy()
        parent_sim[root] = np.nan
        timings["total_s"] = time.perf_counter() - t0
        log.info("ordered %d chunks (%s, %s) in %.3f s", n, strategy, method, timings["total_s"])
        return OrderResult(seq, int(root), parent, parent_sim, qsim, float(weight.sum(dtype=np.float64)),
                           strategy, method, params, timings, meter.peaks, **done)


def runs_keys(relevance: np.ndarray, weight: np.ndarray, parent: np.ndarray, root: int,
              head: float = RUNS_HEAD, tail: float = RUNS_TAIL, strength: float = RUNS_STRENGTH
              ) -> tuple[np.ndarray, np.ndarray]:
    """The chunk and edge keys of the ``"runs"`` order (``kernels.traversal.runs_order``), in
    three tiers ``span`` apart so that no key crosses into another tier: the root and the chunks
    within ``head`` of the best ``relevance`` on top, by relevance; the middle tier holds the
    other chunks' relevance z-scores and the edges' weight z-scores less ``strength`` (an edge
    lifts a chunk into the middle tier's order); chunks more than ``tail`` below the best sit at
    the bottom and come in through the tree's edges."""
    rel = relevance.astype(np.float64)
    zq = (rel - rel.mean()) / max(float(rel.std()), 1e-12)
    edges = weight[parent >= 0].astype(np.float64)
    spread = max(float(edges.std()), 1e-12) if edges.size else 1.0
    ze = (weight.astype(np.float64) - (edges.mean() if edges.size else 0.0)) / spread - strength
    span = 2.0 * max(float(np.abs(zq).max()), float(np.abs(ze[parent >= 0]).max(initial=0.0))) + 1.0
    best = rel.max()
    tier = np.where(rel >= best - head, 2.0, np.where(rel < best - tail, 0.0, 1.0))
    tier[root] = 3.0
    return tier * span + zq, span + ze


def sparse_neighbours(x: np.ndarray, k: int, n_clusters: int, probes: int, seed: int = 0,
                      timings: dict[str, float] | None = None, ray: str | None = None,
                      info: dict[str, Any] | None = None, meter: StageMeter | None = None,
                      progress: Progress = False) -> tuple[np.ndarray, np.ndarray]:
    """Approximate top-``k`` neighbours of unit rows ``x``.

    1. Spherical K-means (``n_clusters`` centres, trained on at most 64 rows per centre).
    2. An inverted-file search of ``probes`` clusters per row done as matrix products
       (``kernels.topk.topk_clustered``; on the Ray cluster ``ray`` when given); above
       ``EXACT_MAX_N`` rows, less the clusters whose centre is more than ``PROBE_GAP`` below the
       row's nearest. Where the CPU has bf16 units (``kernels.bf16.available``), K-means'
       products run on them, and so do the search's where its clusters average at least
       ``BF16_SEARCH_MIN_ROWS`` rows; the lists keep float32 similarities (``info["products"]``
       says which products the search ran).
    3. The recall@k of the lists is estimated on ``RECALL_SAMPLE`` random rows against their
       exact neighbours; while it is below ``REFINE_TARGET``, up to ``MAX_REFINE_PASSES`` passes
       of neighbour-of-neighbour refinement improve them (NN-descent's local join over each
       row's list and ``REVERSE_NEIGHBOURS`` reverse neighbours:
       ``kernels.topk.refine_with_neighbours_of_neighbours``), stopping early once a pass gains,
       or the next is projected to gain, less than ``REFINE_MIN_GAIN`` (``_worth_a_pass``). On
       fuzzy data (5,000 fine topics at n = 100,000) the search alone reaches 0.56 and two passes
       0.97 (``bench/bench_order.py``); on clear data no pass runs.

    The seconds of each stage go into ``timings`` (``kmeans_s``, ``topk_s``, ``refine_s``) and
    ``recall_estimate`` and ``refine_passes`` into ``info`` when given; ``meter`` marks the
    stages' memory. With ``progress``, the search shows rows done and the time left.

    The centres are chunktree's own Lloyd iterations (``kernels.kmeans.spherical_kmeans``), which
    assign rows as the search's probe lists do, on the bf16 units where the CPU has them;
    ``bench/bench_topk.py`` compares them with faiss.Kmeans.
    """
    t0 = time.perf_counter()
    bf16 = bf16_units.available()
    iterations = progress_counter(KMEANS_ITERATIONS, f"order: K-means, {n_clusters:,} centres", "iterations",
                                  enabled=progress)
    centers = spherical_kmeans(x, n_clusters, seed, KMEANS_ITERATIONS, bf16=bf16, done=iterations.update)
    iterations.close()
    bf16 = bf16 and x.shape[0] >= BF16_SEARCH_MIN_ROWS * n_clusters
    t1 = time.perf_counter()
    if meter is not None:
        meter.mark("kmeans")
    bar = _SearchProgress(x.shape[0], enabled=progress)
    gap = PROBE_GAP if x.shape[0] > EXACT_MAX_N else None
    if ray is None:
        ids, sims = topk_clustered(x, k, centers, probes, gap, bar=bar, bf16=bf16)
    else:
        from chunktree.engine import distributed

        ids, sims = distributed.topk_clustered(x, k, centers, probes, ray, gap, bar=bar, bf16=bf16)
    bar.close()
    t2 = time.perf_counter()
    if meter is not None:
        meter.mark("topk")
    n = x.shape[0]
    sample = np.sort(np.random.default_rng(seed).choice(n, min(RECALL_SAMPLE, n), replace=False))
    exact = exact_sims_of_rows(x, sample, k)
    recall, passes = recall_of_rows(sims[sample], exact), 0
    previous = None
    gains: list[float] = []  # the recall each pass gained
    if recall < REFINE_TARGET:
        _said(progress if n >= PLAN_SAID_N else False, f"refinement: recall@{k} of the lists {recall:.3f} on {sample.size:,} "
              f"sampled rows, below {REFINE_TARGET}: up to {MAX_REFINE_PASSES} passes of neighbours of neighbours")
    while recall < REFINE_TARGET and passes < MAX_REFINE_PASSES and _worth_a_pass(gains):
        started = time.perf_counter()
        graph = with_reverse(ids, sims, REVERSE_NEIGHBOURS)
        fresh = np.ones(graph.shape, dtype=bool) if previous is None else fresh_entries(graph, previous)
        rows = progress_counter(n, f"order: refinement pass {passes + 1}", "rows", enabled=progress)
        ids, sims, changed = refine_with_neighbours_of_neighbours(x, ids, sims, graph, fresh, done=rows.update)
        rows.close()
        previous = graph
        before, recall, passes = recall, recall_of_rows(sims[sample], exact), passes + 1
        gains.append(recall - before if changed >= 1e-3 * ids.size else 0.0)
        took = time.perf_counter() - started
        _said(progress, f"refinement pass {passes}: recall@{k} {before:.3f} -> {recall:.3f}, {took:.0f} s", took)
    if timings is not None:
        timings.update(kmeans_s=t1 - t0, topk_s=t2 - t1, refine_s=time.perf_counter() - t2)
    if meter is not None:
        meter.mark("refine")
    if info is not None:
        info.update(products="bf16" if bf16 else "float32", recall_estimate=recall, refine_passes=passes)
    return ids, sims


def _worth_a_pass(gains: list[float]) -> bool:
    """Whether another refinement pass is expected to gain ``REFINE_MIN_GAIN`` of recall: each
    pass's gain is a fraction of the one before (bench/bench_order_10m.py's fine topics), so the
    next is projected as the last gain times that fraction."""
    if not gains:
        return True
    projected = gains[-1] if len(gains) == 1 else gains[-1] * gains[-1] / max(gains[-2], 1e-12)
    return gains[-1] >= REFINE_MIN_GAIN and projected >= REFINE_MIN_GAIN


def _sparse_tree(x: np.ndarray, root: int, k: int | None, n_clusters: int | None, probes: int | None,
                 seed: int, timings: dict[str, float], ray: str | None, meter: StageMeter | None = None,
                 progress: Progress = False) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Spanning tree from the top-K graph: forest, then its components joined. Adds the seconds
    of each stage to ``timings``: ``kmeans_s``, ``topk_s``, ``refine_s``, ``forest_s``, ``join_s``
    (and their peak memory to ``meter``)."""
    n = x.shape[0]
    if k is not None and k > n - 1:
        log.warning("k=%d neighbours asked for, but %d chunks have at most %d others each: using k=%d", k, n, n - 1, n - 1)
    k = min(DEFAULT_K if k is None else k, n - 1)
    n_clusters = min(max(1, round(2 * np.sqrt(n))) if n_clusters is None else n_clusters, n)
    probes = min(DEFAULT_PROBES if probes is None else probes, n_clusters)
    src = dst = np.empty(0, np.int64)
    w = np.empty(0, np.float32)
    found: dict[str, Any] = {}
    if k > 0:
        ids, sims = sparse_neighbours(x, k, n_clusters, probes, seed, timings, ray, found, meter, progress)
        src, dst, w = np.repeat(np.arange(n, dtype=np.int64), k), ids.ravel(), sims.ravel()
        valid = dst >= 0
        if not valid.all():  # views, not copies, when every list is full
            src, dst, w = src[valid], dst[valid], w[valid]
    t0 = time.perf_counter()
    taken, labels = max_spanning_forest(src, dst, w, n)
    components = int(np.unique(labels).size)
    t1 = time.perf_counter()
    _said(progress, f"forest of the neighbour graph: {components:,} components, {t1 - t0:.0f} s", t1 - t0)
    if meter is not None:
        meter.mark("forest")
    j_src, j_dst, j_w = join_components(x, labels, per_row=JOIN_PER_ROW,
                                        said=(lambda line, took: _said(progress, line, took)) if progress else None)
    t_src, t_dst, t_w = (np.concatenate([a[taken], b]) for a, b in ((src, j_src), (dst, j_dst), (w, j_w)))
    tree, _ = max_spanning_forest(t_src, t_dst, t_w, n)  # the forest's edges, the joining and spare edges
    timings.update(forest_s=t1 - t0, join_s=time.perf_counter() - t1)
    parent, weight = orient_tree(t_src[tree], t_dst[tree], t_w[tree], n, np.int64(root))
    if meter is not None:
        meter.mark("join")
    params = {"k": k, "n_clusters": n_clusters, "probes": probes, "seed": seed, **found,
              "forest_components": components, "joining_edges": int((tree >= taken.size).sum())}
    return parent, weight, params


def _said(progress: Progress, line: str, seconds: float = STAGE_LINE_S) -> None:
    """A stage's line to ``progress`` (``chunktree.progress.say``), for a stage that took
    ``STAGE_LINE_S`` seconds or more (the search counts its rows itself; a small run's stages pass
    in silence)."""
    if seconds >= STAGE_LINE_S:
        say(progress, f"order: {line}")


class _SearchProgress(Blocks):
    """The neighbour search's progress (``chunktree.progress``): the rows given their probe lists,
    then the rows searched, each with the time left; after the first block searched, the whole
    search's time projected from the probe lists' time and that block's (times the rounds of
    ``at_once`` blocks)."""

    def __init__(self, n: int, enabled: Progress) -> None:
        self.n, self.enabled = n, enabled
        self.t0 = self.probed_at = time.perf_counter()
        self.probed_rows = self.searched_rows = 0
        self.bar = progress_counter(n, "order: probe lists", "rows", enabled=enabled)

    def probed(self, rows: int) -> None:
        self.probed_rows += rows
        self.bar.update(rows)
        self.probed_at = time.perf_counter()
        if self.probed_rows >= self.n:
            self.bar.close()
            self.bar = progress_counter(self.n, "order: neighbour search", "rows", enabled=self.enabled)

    def searched(self, rows: int) -> None:
        if self.searched_rows == 0 and rows < self.n:
            blocks = -(-self.n // rows)  # the first block searched, of this many; at_once of them at a time
            projected = self.probed_at - self.t0 + (time.perf_counter() - self.probed_at) * -(-blocks // self.at_once)
            self.bar.set_postfix_str(f"projected from the first {rows:,} rows: the search {projected:,.0f} s")
            log.info("order: the search will take about %.0f s (projected from its first %d of %d rows)",
                     projected, rows, self.n)
        self.searched_rows += rows
        self.bar.update(rows)

    def close(self) -> None:
        self.bar.close()


def _check_plan(x: np.ndarray, method: str, k: int | None, probes: int | None, budget_mb: float | None,
                progress: Progress) -> None:
    """Before any work on an embedding array: the sparse method's planned peak memory
    (``engine.memory.planned_peak_bytes``), refused past ``budget_mb``, and said on stderr with
    ``progress`` when the run is large (``PLAN_SAID_N`` rows or more)."""
    n, d = x.shape
    if method == "exact" or (method == "auto" and n <= EXACT_MAX_N):
        planned = n * d * 4 + n * n * 4 + n * 64  # the n x n similarity matrix
    else:
        kept = x.dtype in (np.float16, np.float32)
        planned = planned_peak_bytes(n, d, x.dtype.itemsize if kept else 4, min(k or DEFAULT_K, max(n - 1, 1)),
                                     probes or DEFAULT_PROBES, copied=not kept)
    what = f"ordering {n:,} x {d} {x.dtype} vectors"
    check_budget(planned, budget_mb, what)
    if n >= PLAN_SAID_N:
        budget = "" if budget_mb is None else f" (budget {budget_mb / 1024:.1f} GiB)"
        say(progress, f"order: {what}: planned peak memory about {planned / 2**30:.1f} GiB{budget}")

"""CL-ORDER: the processing order of chunks for a sequential reader, from their Chow-Liu tree.

1. Similarity: cosine of L2-normalised chunk embeddings.
2. Tree: the maximum spanning tree of the complete similarity graph — exact (dense Prim's) or,
   for large n, sparse: the maximum spanning forest of an approximate top-K neighbour graph
   (inverted-file search around FAISS K-means centres, done as matrix products), its components
   joined by their best cross-component edges into one spanning tree.
3. Root: the chunk most similar to the query; without a query, the most central chunk (highest
   mean similarity to all chunks, which for unit vectors is ``x_i . mean(x)``); or the caller's.
4. Traversal: BFS from the root (CL-ORDER) or DFS; children by descending edge weight, ties by
   query similarity, then document position.
Baselines: ``"document"`` (input order) and ``"dense"`` (descending query similarity).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chunktree.engine.chunking import Chunk
from chunktree.engine.vectors import positive_int, unit_vectors
from chunktree.kernels.forest import join_components, max_spanning_forest, orient_tree
from chunktree.kernels.prim import prim_max_spanning_tree
from chunktree.kernels.similarity import similarity_matrix
from chunktree.kernels.topk import topk_clustered
from chunktree.kernels.traversal import bfs_order, children_csr, dfs_order

log = logging.getLogger(__name__)

STRATEGIES = ("bfs", "dfs", "document", "dense")
METHODS = ("auto", "exact", "sparse")
# "auto" takes the exact path up to this many chunks. The exact path holds one n x n float32
# matrix (1.6 GB at n = 20,000); see bench/bench_order.py for the time and memory behind it.
EXACT_MAX_N = 20_000
DEFAULT_K = 16
DEFAULT_PROBES = 16


@dataclass(frozen=True)
class OrderResult:
    """A processing order and the tree behind it.

    Attributes
    ----------
    order : int64 (n,), chunk indices in reading order.
    root : the first chunk.
    parent : int64 (n,), each chunk's parent in the tree, -1 for the root; None for baselines.
    parent_similarity : float32 (n,), similarity to the parent (NaN for the root); None for baselines.
    query_similarity : float32 (n,), similarity of each chunk to the query; None without a query.
    tree_weight : sum of the tree's edge similarities (NaN for baselines).
    strategy, method : what was used; ``params`` holds the rest (n, dims, timings).
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

    def explain(self) -> list[dict[str, Any]]:
        """Per position: the chunk, its parent, its similarity to the parent and to the query."""
        rows = []
        for position, i in enumerate(self.order.tolist()):
            parent = None if self.parent is None or self.parent[i] < 0 else int(self.parent[i])
            rows.append({
                "position": position,
                "chunk": i,
                "parent": parent,
                "parent_similarity": None if parent is None else float(self.parent_similarity[i]),
                "query_similarity": None if self.query_similarity is None else float(self.query_similarity[i]),
            })
        return rows


def order(
    chunks_or_embeddings: Sequence[Chunk] | Sequence[str] | np.ndarray,
    query: str | np.ndarray | None = None,
    *,
    strategy: str = "bfs",
    root: int | None = None,
    method: str = "auto",
    k: int | None = None,
    n_clusters: int | None = None,
    probes: int | None = None,
    seed: int = 0,
    embedder: Any = None,
    cache: Any = None,
) -> OrderResult:
    """Order chunks for a sequential reader (CL-ORDER).

    Parameters
    ----------
    chunks_or_embeddings : ``Chunk`` objects or strings (embedded with ``embedder``, default the
        default model, through ``cache``), or a float array (n, d) of embeddings.
    query : a string (embedded like the chunks) or a vector (d,); optional.
    strategy : ``"bfs"`` (CL-ORDER), ``"dfs"``, ``"document"`` or ``"dense"`` (needs a query).
    root : a chunk index to start from; default: most similar to the query, else most central.
    method : ``"exact"`` (dense Prim's), ``"sparse"`` (top-K graph, forest, joined) or ``"auto"``
        (exact up to ``EXACT_MAX_N`` chunks, sparse beyond).
    k, n_clusters, probes, seed : the sparse method's neighbours per chunk (default 16, capped at
        n - 1), K-means clusters (default 2 * sqrt(n)), clusters searched per chunk (default 16)
        and K-means seed.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}; got {strategy!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}; got {method!r}")
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    x, q = unit_vectors(chunks_or_embeddings, query, embedder, cache)
    timings["embed_s"] = time.perf_counter() - t0
    n, d = x.shape
    if root is not None and (not isinstance(root, (int, np.integer)) or not 0 <= root < n):
        raise ValueError(f"root must be a chunk index in [0, {n - 1}]; got {root!r}")
    if strategy == "dense" and q is None:
        raise ValueError("strategy 'dense' orders by query similarity and needs a query")
    qsim = None if q is None else x @ q
    params: dict[str, Any] = {"n": n, "dims": d}

    if strategy in ("document", "dense"):
        ids = np.arange(n, dtype=np.int64)
        seq = ids if strategy == "document" else np.lexsort((ids, -qsim)).astype(np.int64)
        return OrderResult(seq, int(seq[0]), None, None, qsim, float("nan"), strategy, "none",
                           {**params, **timings})

    if root is None:
        root = int(np.argmax(qsim)) if qsim is not None else int(np.argmax(x @ x.mean(axis=0)))
    if method == "exact" and (k, n_clusters, probes) != (None, None, None):
        raise ValueError("k, n_clusters and probes set the sparse method; they do not apply to method='exact'")
    if method == "auto":
        method = "exact" if n <= EXACT_MAX_N else "sparse"
    t1 = time.perf_counter()
    if method == "exact":
        parent, weight = prim_max_spanning_tree(similarity_matrix(x), np.int64(root))
    else:
        parent, weight, sparse_params = _sparse_tree(x, root, k, n_clusters, probes, seed)
        params.update(sparse_params)
    timings["tree_s"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    ids = np.arange(n)
    # Children by descending edge weight, then descending query similarity, then position.
    keys = (-weight, -qsim) if qsim is not None else (-weight,)
    indptr, children = children_csr(parent, *keys)
    walk = bfs_order if strategy == "bfs" else dfs_order
    seq = walk(indptr, children, np.int64(root))
    timings["traverse_s"] = time.perf_counter() - t2
    parent_sim = weight.copy()
    parent_sim[root] = np.nan
    log.info("ordered %d chunks (%s, %s) in %.3f s", n, strategy, method, time.perf_counter() - t0)
    return OrderResult(seq, root, parent, parent_sim, qsim, float(weight.sum(dtype=np.float64)),
                       strategy, method, {**params, **timings})


def sparse_neighbours(x: np.ndarray, k: int, n_clusters: int, probes: int, seed: int = 0
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Approximate top-``k`` neighbours of unit rows ``x``: FAISS spherical K-means (``n_clusters``
    centres, trained on at most 64 points per centre), then an inverted-file search of ``probes``
    clusters per row done as matrix products (``kernels.topk.topk_clustered``)."""
    import faiss

    km = faiss.Kmeans(x.shape[1], n_clusters, niter=10, seed=seed, spherical=True,
                      max_points_per_centroid=64, min_points_per_centroid=1)
    km.train(x)
    return topk_clustered(x, k, km.centroids, probes)


def _sparse_tree(x: np.ndarray, root: int, k: int | None, n_clusters: int | None, probes: int | None,
                 seed: int) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Spanning tree from the top-K graph: forest, then its components joined."""
    n = x.shape[0]
    k = min(positive_int(DEFAULT_K if k is None else k, "k"), n - 1)
    if n_clusters is None:
        n_clusters = max(1, round(2 * np.sqrt(n)))
    n_clusters = min(positive_int(n_clusters, "n_clusters"), n)
    probes = min(positive_int(DEFAULT_PROBES if probes is None else probes, "probes"), n_clusters)
    src = dst = np.empty(0, np.int64)
    w = np.empty(0, np.float32)
    if k > 0:
        ids, sims = sparse_neighbours(x, k, n_clusters, probes, seed)
        valid = ids.ravel() >= 0
        src = np.repeat(np.arange(n, dtype=np.int64), k)[valid]
        dst, w = ids.ravel()[valid], sims.ravel()[valid]
    taken, labels = max_spanning_forest(src, dst, w, n)
    components = int(np.unique(labels).size)
    j_src, j_dst, j_w = join_components(x, labels)
    parent, weight = orient_tree(np.concatenate([src[taken], j_src]), np.concatenate([dst[taken], j_dst]),
                                 np.concatenate([w[taken], j_w]), n, np.int64(root))
    params = {"k": k, "n_clusters": n_clusters, "probes": probes, "seed": seed,
              "forest_components": components, "joining_edges": int(j_src.size)}
    return parent, weight, params

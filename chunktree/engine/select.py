"""Query-free selection: K representative chunks that together cover every topic.

K-means on the L2-normalised embeddings with K = the number of outputs wanted; each cluster is
represented by the chunk(s) nearest its centre. Every chunk belongs to exactly one cluster, each
cluster gives ``per_cluster`` representatives, and everything keeps its provenance.

K, when not given: ``budget_tokens`` divided by (mean chunk tokens x per_cluster), so the
representatives fit a token budget; or ``k="elbow"``, the bend of the inertia curve.

Small topics get squeezed by plain K-means (a 5% topic rarely wins a centre of its own).
``balance=True`` is the remedy: over-cluster into 4K fine clusters, keep K of them chosen
farthest-first (starting from the largest), and let every other fine cluster join the nearest
kept one. On imbalanced draws of BBC News (label sizes 400/160/60/25/10) it raised topic
coverage at K = 5 from 56-60% to 64-70%; on the balanced set it cost 96% -> 94% and on the
sample's chapters 60.6% -> 57.0% at K = 135 (bench/eval_select.py), so it is opt-in.

Clusters are returned in the input order of their first representative, so the selection reads
in document order.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chunktree.engine.chunking import Chunk
from chunktree.engine.kmeans import MiniBatchKMeans
from chunktree.engine.vectors import positive_int, unit_vectors
from chunktree.kernels.kmeans import assign

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Cluster:
    """One topic of the selection.

    Attributes
    ----------
    id : position in ``SelectResult.clusters``.
    representatives : chunk indices nearest the centre, nearest first.
    distances : Euclidean distance of each representative to the centre.
    size : number of member chunks.
    members : every member chunk index, ascending.
    chunks : the representative ``Chunk`` objects (with provenance) when chunks were given.
    """

    id: int
    representatives: tuple[int, ...]
    distances: tuple[float, ...]
    size: int
    members: tuple[int, ...]
    chunks: tuple[Chunk, ...] = ()


@dataclass(frozen=True)
class SelectResult:
    """Clusters in document order, each chunk's cluster (``labels``, an index into ``clusters``),
    the cluster centres (float32, one row per cluster) and how they were made."""

    clusters: list[Cluster]
    labels: np.ndarray
    centers: np.ndarray
    k: int
    inertia: float
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def representatives(self) -> list[int]:
        """Every representative chunk index, cluster by cluster."""
        return [i for c in self.clusters for i in c.representatives]


def _token_counts(items: Any, tokens: Any, embedder: Any, n: int) -> np.ndarray:
    if tokens is not None:
        counts = np.asarray(tokens)
        if counts.shape != (n,) or counts.dtype.kind not in "iu" or (counts < 0).any():
            raise ValueError(f"tokens must be {n} non-negative ints, one per chunk; got shape {counts.shape}")
        return counts
    if isinstance(items, np.ndarray) or not isinstance(items[0], (str, Chunk)):
        raise ValueError("budget_tokens with embeddings needs tokens= (the token count of each chunk)")
    if embedder is None:
        from chunktree.models.embedder import Embedder

        embedder = Embedder()
    texts = [c.text if isinstance(c, Chunk) else c for c in items]
    return np.array([len(e.ids) for e in embedder.tokenizer.encode_batch(texts)])


def elbow_k(x: np.ndarray, k_max: int, seed: int = 0) -> tuple[int, dict[int, float]]:
    """K at the bend of the inertia curve over a geometric grid of K in [2, k_max]: the point
    farthest below the chord between the curve's ends (both axes scaled to [0, 1])."""
    grid = np.unique(np.round(np.geomspace(2, max(k_max, 2), 12)).astype(int))
    inertias = {int(k): MiniBatchKMeans(int(k), random_state=seed).fit(x).inertia_ for k in grid}
    if len(grid) < 3:
        return int(grid[-1]), inertias
    ks = np.array(list(inertias), dtype=np.float64)
    ys = np.array(list(inertias.values()))
    xs = (ks - ks[0]) / (ks[-1] - ks[0])
    span = ys[0] - ys[-1]
    ys = (ys - ys[-1]) / span if span > 0 else np.zeros_like(ys)
    # The chord runs from (0, 1) to (1, 0); below it by 1 - x - y.
    return int(ks[int(np.argmax(1.0 - xs - ys))]), inertias


def select(
    chunks_or_embeddings: Sequence[Chunk] | Sequence[str] | np.ndarray,
    k: int | str | None = None,
    *,
    per_cluster: int = 1,
    budget_tokens: int | None = None,
    tokens: Sequence[int] | np.ndarray | None = None,
    balance: bool = False,
    seed: int = 0,
    embedder: Any = None,
    cache: Any = None,
) -> SelectResult:
    """Pick representative chunks that cover every topic, without a query.

    Parameters
    ----------
    chunks_or_embeddings : ``Chunk`` objects or strings (embedded with ``embedder`` through
        ``cache``), or a float array (n, d) of embeddings.
    k : the number of clusters (outputs wanted), ``"elbow"``, or None to derive it from
        ``budget_tokens``.
    per_cluster : representatives per cluster (the members nearest the centre).
    budget_tokens : with ``k=None``: K = budget_tokens // (mean chunk tokens * per_cluster).
    tokens : token count of each chunk (needed with ``budget_tokens`` for embeddings input;
        counted with the embedder's tokenizer for chunks).
    balance : give small topics a better chance of a cluster of their own (see the module notes).
    seed : K-means seed; the same seed gives the same selection.
    """
    per_cluster = positive_int(per_cluster, "per_cluster")
    x, _ = unit_vectors(chunks_or_embeddings, None, embedder, cache)
    n = x.shape[0]
    params: dict[str, Any] = {"n": n, "per_cluster": per_cluster, "seed": seed}
    if k is None:
        if budget_tokens is None:
            raise ValueError("give k (the number of outputs), k='elbow', or budget_tokens")
        budget_tokens = positive_int(budget_tokens, "budget_tokens")
        counts = _token_counts(chunks_or_embeddings, tokens, embedder, n)
        mean_tokens = max(float(counts.mean()), 1.0)
        k = int(budget_tokens // (mean_tokens * per_cluster))
        if k < 1:
            raise ValueError(f"budget_tokens={budget_tokens} is below one representative "
                             f"(mean chunk {mean_tokens:.0f} tokens x per_cluster {per_cluster})")
        k = min(k, n)
        params.update(budget_tokens=budget_tokens, mean_chunk_tokens=mean_tokens)
    elif k == "elbow":
        k, curve = elbow_k(x, min(n, max(2, int(2 * np.sqrt(n)))), seed)
        params["elbow_inertia"] = curve
    elif isinstance(k, str):
        raise ValueError(f"k must be a positive int, 'elbow' or None; got {k!r}")
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or not 1 <= k <= n:
        raise ValueError(f"k must be in [1, n_chunks={n}]; got {k!r}")
    k = int(k)

    if balance:
        centers, labels, dist_sq, steps = _balanced_clusters(x, k, seed)
    else:
        model = MiniBatchKMeans(k, random_state=seed).fit(x)
        centers, labels, steps = model.cluster_centers_, model.labels_, model.n_steps_
        dist_sq = assign(x, centers)[1]
    dist = np.sqrt(dist_sq)
    clusters = []
    for c in range(k):
        members = np.flatnonzero(labels == c)
        if members.size == 0:
            continue
        nearest = members[np.lexsort((members, dist[members]))][:per_cluster]
        clusters.append((c, nearest, dist[nearest], members))
    clusters.sort(key=lambda cl: int(cl[1].min()))
    items = chunks_or_embeddings if not isinstance(chunks_or_embeddings, np.ndarray) else None
    has_chunks = items is not None and len(items) > 0 and isinstance(items[0], Chunk)
    out = []
    relabel = np.empty(n, dtype=np.int64)
    kept_centers = []
    for cid, (c, nearest, d, members) in enumerate(clusters):
        kept_centers.append(centers[c])
        relabel[members] = cid
        out.append(Cluster(
            id=cid, representatives=tuple(int(i) for i in nearest), distances=tuple(float(v) for v in d),
            size=int(members.size), members=tuple(int(i) for i in members),
            chunks=tuple(items[int(i)] for i in nearest) if has_chunks else (),
        ))
    params.update(k=k, balance=balance, n_steps=steps)
    if len(out) < k:
        log.warning("K-means left %d of %d clusters empty; %d clusters returned", k - len(out), k, len(out))
    inertia = float(dist_sq.sum(dtype=np.float64))
    return SelectResult(out, relabel, np.array(kept_centers, dtype=np.float32), k, inertia, params)


def _balanced_clusters(x: np.ndarray, k: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """K clusters from 4K fine ones: K fine centres kept farthest-first (from the largest fine
    cluster), every fine cluster joined to the nearest kept centre. Returns centres, labels,
    each row's squared distance to its own cluster's centre, and the fine K-means' steps."""
    fine = MiniBatchKMeans(min(x.shape[0], 4 * k), random_state=seed).fit(x)
    fine_centers = fine.cluster_centers_
    sizes = np.bincount(fine.labels_, minlength=fine_centers.shape[0])
    kept = [int(np.argmax(sizes))]
    far = np.linalg.norm(fine_centers - fine_centers[kept[0]], axis=1)
    while len(kept) < k and far.max() > 0:
        kept.append(int(np.argmax(far)))
        far = np.minimum(far, np.linalg.norm(fine_centers - fine_centers[kept[-1]], axis=1))
    centers = np.ascontiguousarray(fine_centers[kept])
    labels = assign(fine_centers, centers)[0][fine.labels_]
    dist_sq = np.sum((x - centers[labels]) ** 2, axis=1)
    return centers, labels, dist_sq, fine.n_steps_

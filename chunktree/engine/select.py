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

``coverage=True`` chooses the K representatives to cover the corpus instead of one per K-means
cluster (which repeats big topics): over-cluster into 4K fine clusters, take each fine cluster's
medoid (its member nearest its centre) as a candidate, and pick K of them greedily by facility
location, each candidate weighted by the square root of its cluster's size:
maximise sum_c sqrt(size_c) * max_{s in S} max(0, cos(c, s)). Every chunk then joins its nearest
representative. Its figures against plain K-means are on the benchmark page (eval_select).

Clusters are returned in the input order of their first representative, so the selection reads
in document order.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from chunktree.checks import SEED_MAX, InvalidTypeError, InvalidValueError, integer, normalised, positive_int
from chunktree.engine.cache import EmbeddingCache
from chunktree.engine.chunking import Chunk
from chunktree.engine.embedding import EmbedStats
from chunktree.engine.inputs import prepare
from chunktree.engine.memory import StageMeter
from chunktree.engine.minibatch_kmeans import MiniBatchKMeans
from chunktree.engine.results import chunk_fields
from chunktree.kernels.kmeans import assign
from chunktree.progress import Progress

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Cluster:
    """One topic of the selection.

    Attributes
    ----------
    id
        position in ``SelectResult.clusters``.
    representatives
        chunk indices nearest the centre, nearest first.
    distances
        Euclidean distance of each representative to the centre.
    mean_distance
        the members' mean Euclidean distance to the centre: how broad the cluster is (under
        ``coverage`` the centre is the first representative, whose distance is 0).
    size
        number of member chunks.
    members
        int64 array of every member chunk index, ascending.
    chunks
        the representative ``Chunk`` objects (with provenance) when chunks were given.
    """

    id: int
    representatives: tuple[int, ...]
    distances: tuple[float, ...]
    mean_distance: float
    size: int
    members: np.ndarray = field(repr=False)
    chunks: tuple[Chunk, ...] = ()


@dataclass(frozen=True)
class SelectResult:
    """A query-free selection.

    Attributes
    ----------
    clusters
        in the input order of their first representative.
    labels
        int64 (n,), each chunk's cluster (an index into ``clusters``).
    centers
        float32 (len(clusters), d), the cluster centres.
    k
        the K asked for (or derived); ``len(clusters)`` is smaller when fewer than K chunks are
        distinct (exact duplicates always share a cluster) or K-means left a cluster empty.
    inertia
        sum of squared distances of the chunks to their centres.
    params
        the parameters that decided the result (n, k, per_cluster, seed, balance, and how K
        was derived) and what the data allowed: ``distinct_chunks`` and ``duplicates`` (chunks
        that repeat an earlier one exactly; they join its cluster and never represent one).
    timings
        seconds per stage (``embed_s``, ``cluster_s``, ``total_s``).
    embedding
        what embedding the chunks cost (None when embeddings were given).
    items
        the chunks or strings that were clustered (None when embeddings were given).
    vectors
        float32 (n, d), the unit vectors that were clustered (for ``to_html``/``to_png``).
    peak_memory_mb
        peak resident memory of the process in MB during each stage (``embed``, ``cluster``;
        ``engine.memory.StageMeter``); empty where the platform has no ``/proc``.
    """

    clusters: list[Cluster]
    labels: np.ndarray
    centers: np.ndarray
    k: int
    inertia: float
    params: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    embedding: EmbedStats | None = None
    items: Sequence[Chunk] | Sequence[str] | None = field(default=None, repr=False)
    vectors: np.ndarray | None = field(default=None, repr=False)
    peak_memory_mb: dict[str, float] = field(default_factory=dict)

    @property
    def representatives(self) -> list[int]:
        """Every representative chunk index, cluster by cluster."""
        return [i for c in self.clusters for i in c.representatives]

    def to_html(self, path: str | Path, max_nodes: int | None = None) -> Path:
        """Write the chunks in two dimensions, coloured by cluster, as an interactive HTML page
        that opens offline (``engine.pictures``; ``chunktree[plot]``)."""
        from chunktree.engine import pictures

        return pictures.write_html(pictures.clusters_figure(self, max_nodes or pictures.MAX_NODES), path)

    def to_png(self, path: str | Path, max_nodes: int | None = None) -> Path:
        """Write the same picture of the clusters as a PNG (matplotlib)."""
        from chunktree.engine import pictures

        return pictures.clusters_png(self, path, max_nodes or pictures.MAX_NODES)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready result: each cluster with its size, members and representatives (their
        provenance, text and distance to the centre)."""
        clusters = []
        for c in self.clusters:
            reps = [{"id": i, **chunk_fields(None if self.items is None else self.items[i]), "distance": d}
                    for i, d in zip(c.representatives, c.distances)]
            clusters.append({"cluster": c.id, "size": c.size, "mean_distance": c.mean_distance,
                             "members": c.members.tolist(), "representatives": reps})
        return {"k": self.k, "n_clusters": len(self.clusters), "n_chunks": int(self.labels.size),
                "inertia": self.inertia, "params": dict(self.params), "timings": dict(self.timings),
                "memory_mb": dict(self.peak_memory_mb),
                "embedding": None if self.embedding is None else self.embedding.to_dict(), "clusters": clusters}


HINT_ROWS = 5_000  # ``more_groups`` finds the bend on at most this many rows


def more_groups(x: np.ndarray | None, k: int, seed: int = 0) -> int | None:
    """The data's own K, where it is larger than the ``k`` asked for (else None): the bend of the
    K-means inertia curve (``elbow_k``) on at most ``HINT_ROWS`` rows of ``x``. With more groups
    than clusters, some clusters hold several subjects."""
    if x is None or x.shape[0] <= k + 1:
        return None
    if x.shape[0] > HINT_ROWS:
        x = x[np.random.default_rng(seed).choice(x.shape[0], HINT_ROWS, replace=False)]
    suggested, _ = elbow_k(x, max(2, int(2 * np.sqrt(x.shape[0]))), seed)
    return suggested if suggested > k else None


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


def _check_k(k: Any, budget_tokens: Any) -> None:
    """The checks on k that need no data, so they fail before anything is embedded."""
    if k is None:
        if budget_tokens is None:
            raise InvalidValueError("give k (the number of outputs), k='elbow', or budget_tokens")
        positive_int(budget_tokens, "budget_tokens")
    elif isinstance(k, str):
        if k != "elbow":
            raise InvalidValueError(f"k must be a positive int, 'elbow' or None; got {k!r}", param="k")
    else:
        positive_int(k, "k")


def _token_counts(tokens: Any, n: int) -> np.ndarray:
    counts = np.asarray(tokens)
    if counts.shape != (n,) or counts.dtype.kind not in "iu" or (counts < 0).any():
        raise InvalidValueError(f"tokens must be {n} non-negative ints, one per chunk; got shape {counts.shape}")
    return counts


def select(
    chunks_or_embeddings: Sequence[Chunk] | Sequence[str] | np.ndarray,
    k: int | str | None = None,
    *,
    per_cluster: int = 1,
    budget_tokens: int | None = None,
    tokens: Sequence[int] | np.ndarray | None = None,
    balance: bool = False,
    coverage: bool = False,
    seed: int = 0,
    embedder: Any = None,
    cache: EmbeddingCache | None = None,
    progress: Progress = False,
) -> SelectResult:
    """Pick representative chunks that cover every topic, without a query.

    Parameters
    ----------
    chunks_or_embeddings
        ``Chunk`` objects or strings (embedded with ``embedder`` through
        ``cache``), or a float array (n, d) of embeddings.
    k
        the number of clusters (outputs wanted), ``"elbow"``, or None to derive it from
        ``budget_tokens``.
    per_cluster
        representatives per cluster (the members nearest the centre); a cluster with fewer members
        gives them all.
    budget_tokens
        with ``k=None``: K = budget_tokens // (mean chunk tokens * per_cluster).
    tokens
        token count of each chunk (needed with ``budget_tokens`` for embeddings input;
        counted with ``Embedder.count_tokens`` for chunks and strings).
    balance
        give small topics a better chance of a cluster of their own (see the module notes).
    coverage
        choose the representatives by facility location over fine clusters, to cover more
        distinct topics for the same K (see the module notes); not with ``balance``.
    seed
        K-means seed; the same seed gives the same selection.
    progress
        show a progress bar while embedding.
    """
    per_cluster = positive_int(per_cluster, "per_cluster")
    _check_k(k, budget_tokens)
    integer(seed, "seed", 0, SEED_MAX)
    for flag, name in ((balance, "balance"), (coverage, "coverage")):
        if not isinstance(flag, (bool, np.bool_)):
            raise InvalidTypeError(f"{name} must be a bool; got {flag!r}")
    if balance and coverage:
        raise InvalidValueError("balance and coverage are two ways of choosing the clusters; give one of them")
    with StageMeter() as meter:  # each stage's peak memory; its sampling thread ends with the call
        t0 = time.perf_counter()
        inputs = prepare(chunks_or_embeddings, embedder=embedder, cache=cache, progress=progress)
        timings = {"embed_s": time.perf_counter() - t0}
        meter.mark("embed")
        x, n = inputs.vectors, inputs.n
        params: dict[str, Any] = {"n": n, "per_cluster": per_cluster, "seed": seed, "balance": bool(balance),
                                  "coverage": bool(coverage)}
        t1 = time.perf_counter()
        if k is None:
            counts = _token_counts(tokens, n) if tokens is not None else inputs.token_counts()
            mean_tokens = max(float(counts.mean()), 1.0)
            k = int(budget_tokens // (mean_tokens * per_cluster))  # type: ignore[operator]  # checked above: k or budget_tokens
            if k < 1:
                raise InvalidValueError(f"budget_tokens={budget_tokens} is below one representative "
                                        f"(mean chunk {mean_tokens:.0f} tokens x per_cluster {per_cluster})")
            k = min(k, n)
            params.update(budget_tokens=budget_tokens, mean_chunk_tokens=mean_tokens)
        elif k == "elbow":
            k, curve = elbow_k(x, min(n, max(2, int(2 * np.sqrt(n)))), seed)
            params["elbow_inertia"] = curve
        k = integer(k, "k", 1, n, high_name="n_chunks")

        if balance:
            centers, labels, dist_sq, passes = _balanced_clusters(x, k, seed)
        elif coverage:
            centers, labels, dist_sq, passes = _covering_clusters(x, k, seed)
        else:
            model = MiniBatchKMeans(k, random_state=seed).fit(x)
            centers, labels, dist_sq, passes = model.cluster_centers_, model.labels_, model.distances_sq_, model.n_iter_
        # Exact duplicates (equal vectors; equal texts embed equally) join their first copy's cluster,
        # so no two clusters hold the same content, and only first copies represent a cluster.
        first = inputs.first_copies()
        labels, dist_sq = labels[first], dist_sq[first]
        is_first = first == np.arange(n)
        distinct = int(is_first.sum())
        dist = np.sqrt(dist_sq)
        # Members of every cluster in one pass: rows sorted by (label, row), cut at the label counts.
        by_label = np.argsort(labels, kind="stable")
        sizes = np.bincount(labels, minlength=k)
        groups = np.split(by_label, np.cumsum(sizes)[:-1])
        found = []
        for c in np.flatnonzero(sizes):
            members = groups[c]
            candidates = members[is_first[members]]
            nearest = candidates[np.lexsort((candidates, dist[candidates]))][:per_cluster]
            found.append((int(c), nearest, members))
        found.sort(key=lambda cl: int(cl[1].min()))  # document order of the representatives
        chunks = inputs.chunks
        clusters, kept = [], []
        relabel = np.empty(n, dtype=np.int64)
        for cid, (label, nearest, members) in enumerate(found):
            kept.append(label)
            relabel[members] = cid
            members.flags.writeable = False
            clusters.append(Cluster(
                id=cid, representatives=tuple(nearest.tolist()), distances=tuple(dist[nearest].tolist()),
                mean_distance=float(dist[members].mean()), size=int(members.size), members=members,
                chunks=tuple(chunks[i] for i in nearest.tolist()) if chunks is not None else (),
            ))
        params.update(k=k, kmeans_passes=passes, distinct_chunks=distinct, duplicates=n - distinct)
        if len(clusters) < k:
            why = (f"only {distinct} of the {n} chunks are distinct" if distinct < k
                   else "K-means left some clusters empty")
            log.warning("%d clusters returned for k=%d: %s", len(clusters), k, why)
        timings["cluster_s"] = time.perf_counter() - t1
        timings["total_s"] = time.perf_counter() - t0
        inertia = float(dist_sq.sum(dtype=np.float64))
        meter.mark("cluster")
        return SelectResult(clusters, relabel, np.ascontiguousarray(centers[kept], dtype=np.float32), k, inertia,
                            params, timings, inputs.embedding, inputs.items, x, dict(meter.peaks))


def _covering_clusters(x: np.ndarray, k: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """K clusters around K medoids of 4K fine clusters chosen greedily by facility location (the
    module notes), every row joined to the nearest one. Returns what ``_balanced_clusters`` does."""
    fine = MiniBatchKMeans(min(x.shape[0], 4 * k), random_state=seed).fit(x)
    m = fine.cluster_centers_.shape[0]
    near = assign(x, fine.cluster_centers_)[1]
    by_cluster = np.lexsort((near, fine.labels_))  # rows by fine cluster, nearest its centre first
    sizes = np.bincount(fine.labels_, minlength=m)
    starts = np.r_[0, np.cumsum(sizes)[:-1]]
    full = sizes > 0
    medoids = by_cluster[starts[full]]
    weight = np.sqrt(sizes[full].astype(np.float64))
    unit = normalised(x[medoids])
    sim = np.maximum(unit @ unit.T, 0.0).astype(np.float64)
    best = np.zeros(medoids.size)
    chosen: list[int] = []
    for _ in range(min(k, medoids.size)):
        gain = weight @ np.maximum(sim - best[:, None], 0.0)
        gain[chosen] = -1.0
        j = int(np.argmax(gain))
        chosen.append(j)
        best = np.maximum(best, sim[:, j])
    centers = np.ascontiguousarray(x[medoids[chosen]], dtype=np.float32)
    labels, dist_sq = assign(x, centers)
    return centers, labels, dist_sq, fine.n_iter_


def _balanced_clusters(x: np.ndarray, k: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """K clusters from 4K fine ones: K fine centres kept farthest-first (from the largest fine
    cluster), every fine cluster joined to the nearest kept centre. Returns centres, labels,
    each row's squared distance to its own cluster's centre, and the fine K-means' passes over the data."""
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
    return centers, labels, dist_sq, fine.n_iter_

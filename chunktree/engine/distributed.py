"""Beyond one machine: the embedding and the top-K search on a Ray cluster (``chunktree[ray]``).

The two stages that grow with the corpus and split cleanly run on Ray; everything else stays on
the driver, which builds the forest, joins it and walks it (O(n·K) memory there).

- ``embed_batches``: the batches ``embedding.embed_texts`` would embed in this process go through
  Ray Data ``map_batches`` over a pool of actors, each holding one ONNX session (one thread per
  actor). The driver writes each batch's vectors into the result and the cache as it arrives, so
  an interrupted run resumes through the cache.
- ``topk_clustered``: the centres are computed once on the driver and broadcast through the
  object store with the vectors (on a ``"local"`` cluster, a memory-mapped ``.npy`` is mapped by
  each task instead of copied); one task per block of rows (``kernels.topk.row_block_size``) finds
  each row's probe list, then one task per block searches its rows. The blocks and their
  products are those of the single-process ``kernels.topk.topk_clustered``, so the lists are
  the same.

``connect(address)`` joins a cluster: ``"local"`` starts one on this machine (all its cores),
anything else is the address of a running one (``"auto"``, or ``HOST:PORT`` of ``ray start
--head``). A cluster this process has already joined (``ray.init`` by the caller) is reused.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from chunktree.checks import InvalidValueError, MissingExtraError, require, text
from chunktree.kernels.topk import DEFAULT_BLOCK, Blocks, ClusterIndex, probe_lists, row_block_size, search_rows

log = logging.getLogger(__name__)


def connect(address: str) -> Any:
    """The ``ray`` module, joined to the cluster at ``address`` (``"local"``: start one here)."""
    text(address, "ray address")
    ray = require("ray", "ray", "running on a Ray cluster")
    if not hasattr(ray, "init"):  # a folder named ray on sys.path (Ray's own /tmp/ray), not the package
        raise MissingExtraError(f"running on a Ray cluster needs the 'ray' package, but 'ray' is {ray.__path__!s}: "
                                "pip install 'chunktree[ray]'")
    if ray.is_initialized():
        return ray
    if address not in ("local", "auto"):
        _check_reachable(address)
    try:
        if address == "local":
            ray.init(include_dashboard=False, logging_level=logging.WARNING)
        else:
            ray.init(address=address, include_dashboard=False, logging_level=logging.WARNING)
    except ConnectionError as exc:
        raise InvalidValueError(f"ray address {address!r}: no Ray cluster answers there ({exc}); give 'local' to "
                                f"start one on this machine, or the address printed by `ray start --head`") from None
    log.info("joined a Ray cluster with %s CPUs", ray.cluster_resources().get("CPU"))
    return ray


def _check_reachable(address: str, timeout_s: float = 3.0) -> None:
    """Refuse at once an address where nothing listens: ``ray.init`` would retry it for minutes."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise InvalidValueError(f"ray address {address!r}: expected 'local', 'auto' or HOST:PORT")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise InvalidValueError(f"ray address {address!r}: no Ray cluster answers there ({exc.strerror or exc}); "
                                "give 'local' to start one on this machine, or the address printed by "
                                "`ray start --head`") from None


def cluster_cpus(ray: Any) -> int:
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


class _EmbedActor:
    """One model session per actor, on the driver's backend and precision (so its vectors are the
    ones the cache files under the driver's ``vectors_id``); each call embeds one batch of texts."""

    def __init__(self, model: str, backend: str, precision: str, batch_size: int, batch_tokens: int) -> None:
        from chunktree.models.embedder import Embedder

        self.embedder = Embedder(model, backend=backend, precision=precision, threads=1, batch_size=batch_size,
                                 batch_tokens=batch_tokens)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        ids, rows, vectors = [], [], []
        for batch_id, texts in zip(batch["batch"], batch["texts"]):
            texts = [str(t) for t in texts]
            ids.append(np.full(len(texts), batch_id, dtype=np.int64))
            rows.append(np.arange(len(texts), dtype=np.int64))
            vectors.append(self.embedder.embed(texts))
        return {"batch": np.concatenate(ids), "row": np.concatenate(rows), "vector": np.concatenate(vectors)}


def embed_batches(batches: Sequence[list[str]], embedder: Any, address: str,
                  actors: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
    """Embed each batch of texts on the cluster; yields ``(batch index, vectors)`` as batches finish,
    in any order. ``actors`` defaults to one per CPU of the cluster. The actors load the model the
    driver's ``embedder`` was loaded from (``embedder.path``), on its backend and precision: on a
    real cluster every node needs the same install (and bf16 units, for bf16)."""
    ray = connect(address)
    actors = actors or cluster_cpus(ray)
    ds = ray.data.from_items([{"batch": i, "texts": list(b)} for i, b in enumerate(batches)])
    settings = {"model": str(embedder.path), "backend": embedder.backend, "precision": embedder.precision,
                "batch_size": embedder.batch_size, "batch_tokens": embedder.batch_tokens}
    ds = ds.map_batches(_EmbedActor, fn_constructor_kwargs=settings,
                        batch_size=1, concurrency=actors, num_cpus=1, batch_format="numpy")
    pending: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
    have: dict[int, int] = {}
    for out in ds.iter_batches(batch_size=None, batch_format="numpy"):
        for b in np.unique(out["batch"]):
            mine = out["batch"] == b
            pending.setdefault(int(b), []).append((out["row"][mine], out["vector"][mine]))
            have[int(b)] = have.get(int(b), 0) + int(mine.sum())
            if have[int(b)] == len(batches[b]):  # a batch may arrive in pieces: yield it whole
                vectors = np.empty((len(batches[b]), embedder.dim), dtype=np.float32)
                for rows, part in pending.pop(int(b)):
                    vectors[rows] = part
                yield int(b), vectors


def _mapped_file(x: np.ndarray) -> tuple[str, int, str, tuple[int, ...]] | None:
    """(file, offset, dtype, shape) when ``x`` is the whole of a memory-mapped ``.npy`` (``np.load``
    with ``mmap_mode``), as ``order --embeddings`` passes it; else None."""
    base: Any = x
    while base is not None and not isinstance(base, np.memmap):
        base = base.base
    if base is None or getattr(base, "filename", None) is None or not x.flags.c_contiguous:
        return None
    if base.__array_interface__["data"][0] != x.__array_interface__["data"][0] or base.nbytes != x.nbytes:
        return None
    return str(base.filename), int(base.offset), x.dtype.str, tuple(x.shape)


def _rows(x: np.ndarray | tuple[str, int, str, tuple[int, ...]]) -> np.ndarray:
    """The vectors a task was given: an array, or a file to map (``_mapped_file``)."""
    if isinstance(x, tuple):
        path, offset, dtype, shape = x
        return np.memmap(path, dtype=np.dtype(dtype), mode="r", offset=offset, shape=shape)
    return x


def _probe_task(x: Any, centers: np.ndarray, start: int, stop: int, probes: int, gap: float | None,
                bf16: bool) -> np.ndarray:
    return probe_lists(_rows(x)[start:stop], centers, probes, gap, bf16=bf16)


def _search_task(x: Any, start: int, probed: np.ndarray, clusters: ClusterIndex, k: int,
                 block: int, bf16: bool) -> tuple[np.ndarray, np.ndarray]:
    return search_rows(_rows(x), np.arange(start, start + probed.shape[0]), probed, clusters, k, block, threads=1,
                       bf16=bf16)


def topk_clustered(x: np.ndarray, k: int, centers: np.ndarray, probes: int, address: str, gap: float | None = None,
                   block: int = DEFAULT_BLOCK, row_block: int | None = None, bar: Blocks | None = None,
                   bf16: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``kernels.topk.topk_clustered`` with its blocks of rows as Ray tasks; same arguments and result."""
    ray = connect(address)
    n = x.shape[0]
    row_block = row_block or row_block_size(n)
    bar = bar or Blocks()
    # A memory-mapped file on a cluster of this machine is mapped by the tasks themselves: no copy
    # into the object store (7.7 GB at 10 million float16 rows). Otherwise the vectors go into the
    # object store once, shared by every task of a node.
    mapped = _mapped_file(x) if address == "local" else None
    x_ref, centers_ref = ray.put(mapped or x), ray.put(centers)
    probe = ray.remote(num_cpus=1)(_probe_task)
    search = ray.remote(num_cpus=1)(_search_task)
    starts = list(range(0, n, row_block))
    probed = np.concatenate(ray.get([probe.remote(x_ref, centers_ref, s, min(s + row_block, n), probes, gap, bf16)
                                     for s in starts]))
    bar.probed(n)
    clusters_ref = ray.put(ClusterIndex.build(probed[:, 0], centers.shape[0]))
    ids = np.empty((n, k), dtype=np.int64)
    sims = np.empty((n, k), dtype=np.float32)
    bar.at_once = min(cluster_cpus(ray), len(starts))
    tasks = {search.remote(x_ref, s, probed[s:s + row_block], clusters_ref, k, block, bf16): s for s in starts}
    while tasks:
        done, _ = ray.wait(list(tasks), num_returns=1)
        s = tasks.pop(done[0])
        ids[s:s + row_block], sims[s:s + row_block] = ray.get(done[0])
        bar.searched(min(row_block, n - s))
    return ids, sims

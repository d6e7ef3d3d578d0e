"""Kernels: pure functions, arrays in, arrays out; no I/O, no classes, no logging.

Numba where a loop is the work (``prim``, ``forest``'s Kruskal, tree orientation, merge of
products and small components' reach, ``traversal``, ``kmeans.center_sums``); NumPy driving BLAS
in row blocks where matrix products are (``similarity``, ``topk``, ``kmeans.assign``,
``forest``'s cross-component edges, on Python threads with one BLAS thread each). Inputs are
checked once at the engine boundary (``engine.inputs``), so kernels assume C-contiguous float32
and int64 indices.
"""

"""Kernels: pure functions, arrays in, arrays out; no I/O, no classes, no logging.

Numba where a loop is the work (``prim``, ``forest``'s Kruskal, tree orientation, merge of
products and small components' reach, ``traversal``, ``kmeans.center_sums``); NumPy driving BLAS
in row blocks where matrix products are (``similarity``, ``topk``, ``kmeans.assign``,
``forest``'s cross-component edges, on Python threads with one BLAS thread each); OpenVINO where
the CPU has bf16 units and a product's float32 value can be recomputed where it decides
(``bf16``: ``topk``'s search and probe lists, ``kmeans.spherical_kmeans``). Inputs are checked
once at the engine boundary (``engine.inputs``), so kernels assume unit rows, float32 or float16
(``rows``), and int64 indices.
"""

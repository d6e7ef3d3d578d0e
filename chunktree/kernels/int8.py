"""Similarity products in int8, for searches that rescore their candidates exactly.

The left side's rows are quantised one scale per row (``round(63 * v / max|v|)``, stored as
uint8 value + 64), the right side's block of rows with one scale for the block (``round(127 * v /
max|v|)``), and the products run through onnxruntime's ``MatMulInteger`` (MLAS's uint8 x int8
kernel). Where the CPU has VNNI that kernel sums in int32; on AVX2 alone it first adds each two
uint8 x int8 products in a saturating int16, which 255 x 127 + 255 x 127 overflows: a left side of
at most 127 keeps every such sum within int16, so the product is exact on either CPU (the
columns, sharing one scale a block, keep the finer range). The joining search
on fuzzy data is such products (``kernels.forest._best_edges_into``), and bench/bench_join.py
times it against the same search in float32. An int8 score is only a ranking: the error of one
similarity is about 1e-3 at d = 384, so callers keep a few more candidates than they need and
compute the exact similarity of those.
"""

import threading
from typing import Any

import numpy as np
from numba import njit

_SESSION = None
_SESSION_LOCK = threading.Lock()
# The graph: one MatMulInteger node, Y = A @ B with A's zero point 64 (opset 13, IR version 8),
# stored serialised (120 bytes) because building it needs the onnx package, whose import took
# 0.6 s here: more than the whole join at n = 100,000. tests/kernels/test_int8.py builds it with
# onnx.helper and checks that the file holds that graph.
MODEL = "int8_product.onnx"


def _session() -> Any:
    """One onnxruntime session computing ``A @ B`` for uint8 A (zero point 64) and int8 B, made
    once however many threads ask for it at once, run on the calling thread."""
    global _SESSION
    with _SESSION_LOCK:
        if _SESSION is None:
            from importlib import resources

            import onnxruntime as ort

            options = ort.SessionOptions()
            # One thread a product: callers run products in several threads at once, each merging
            # its own product while it is in its core's cache (``kernels.forest._best_edges_into``).
            options.intra_op_num_threads = 1
            model = (resources.files("chunktree") / "data" / MODEL).read_bytes()
            _SESSION = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    return _SESSION


# Rows quantised together: a transposed tile is written 64 bytes at a time, a cache line, rather
# than each row's column on its own.
TILE = 64


@njit(cache=True, nogil=True)
def _quantise(v, inverse, out, offset, transpose):  # pragma: no cover - compiled
    """Row i of ``v`` as round(v * inverse[i]) + ``offset`` into row i of ``out`` (column i when
    ``transpose``). Serial, without the GIL: callers quantise in several threads at once."""
    for i0 in range(0, v.shape[0], TILE):
        i1 = min(i0 + TILE, v.shape[0])
        if transpose:
            for j in range(v.shape[1]):
                for i in range(i0, i1):
                    out[j, i] = np.int32(np.rint(v[i, j] * inverse[i])) + offset
        else:
            for i in range(i0, i1):
                for j in range(v.shape[1]):
                    out[i, j] = np.int32(np.rint(v[i, j] * inverse[i])) + offset


# The largest integer of each side, and the left's zero point: its uint8 holds value + 64, at
# most 127, so that 127 x 127 + 127 x 127 fits in an int16 (see above).
LEFT_LEVELS, LEFT_ZERO, RIGHT_LEVELS = 63, 64, 127


def _scale(top: np.ndarray, levels: int) -> np.ndarray:
    """The step that maps ``top`` (the largest magnitude) to ``levels``; 1 where ``top`` is 0."""
    return np.where(top > 0, top / np.float32(levels), np.float32(1.0)).astype(np.float32)


def quantise_rows(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float32 rows (m, d) as uint8 (m, d) (value + 64, value in -63..63), each with its own
    scale, and the float32 scales (m,): the left side."""
    v = np.ascontiguousarray(v, dtype=np.float32)
    out = np.empty(v.shape, np.uint8)
    scale = _scale(np.abs(v).max(axis=1, initial=0.0), LEFT_LEVELS)
    _quantise(v, np.float32(1.0) / scale, out, LEFT_ZERO, False)
    return out, scale


def quantise_columns(v: np.ndarray) -> tuple[np.ndarray, float]:
    """float32 rows (m, d) as int8 (d, m), transposed, all with one scale, and that scale: the
    right side. With one scale for the block, each row of a product ranks the block's columns by
    its integers alone, so the merge tests a chunk of them against one bound
    (``kernels.forest._keep_best``). A row's own scale would be finer; the candidates kept and
    rescored exactly (``kernels.forest.CANDIDATES``) absorb the coarser ranking."""
    v = np.ascontiguousarray(v, dtype=np.float32)
    out = np.empty(v.shape[::-1], np.int8)
    scale = _scale(np.abs(v).max(initial=0.0), RIGHT_LEVELS)
    _quantise(v, np.full(v.shape[0], np.float32(1.0) / scale, np.float32), out, 0, True)
    return out, float(scale)


def product(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """int32 (m, c): ``quantise_rows``' output times ``quantise_columns``'. Row i, column j
    approximates similarity / (row scale_i * column scale)."""
    return _session().run(None, {"A": left, "B": right})[0]

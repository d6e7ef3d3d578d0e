"""Matrix products on the CPU's bf16 units (AMX tiles, AVX-512 BF16), through OpenVINO.

The top-K search, its probe lists and its K-means are matrix products of unit rows. Rounded to
bf16 (8 significant bits) and summed in float32, a product runs on the CPU's bf16 units, several
times faster than BLAS's float32 product where the CPU has AMX (bench/bench_products.py compares
the stages that use them). A bf16
product is off from the float32 one by at most ``margin(d)``, so the kernels that use these
products keep float32 values: a product that comes within ``margin`` of what decides (a list's
k-th best) is computed again in float32 from the two rows (``dot``), and that value is kept.
Their lists are the ones float32 products give, up to float32 rounding: where two candidates'
similarities differ by about 1e-7, either may come first.

Each Python thread compiles its own one-thread model, unpinned: two threads sharing one
single-stream model take turns. OpenVINO prepares each new shape of a product (longer than a
mid-sized product takes), so ``to_bf16`` pads the rows to a multiple of ``ROW_STEP``: a search
sees a few hundred shapes, not tens of thousands.
"""

import threading
from functools import cache
from typing import Any

import numpy as np
from numba import njit

# Rows are unit within checks.UNIT_TOLERANCE_F16 (float32 rows within 1e-6): norms at most this.
NORM_BOUND = 1.002
ROW_STEP = 64

_local = threading.local()


@cache
def available() -> bool:
    """Whether this machine runs bf16 products natively: OpenVINO loads and lists BF16, which it
    does on a CPU with AVX-512 BF16 or AMX."""
    from chunktree.cpu import has_bf16_units, openvino_core

    core, _why_not = openvino_core()
    return core is not None and has_bf16_units(core)


def margin(d: int) -> float:
    """The most a bf16 product of two rows of dimension ``d`` and norm at most ``NORM_BOUND`` can
    be off from their float32 product: rounding a factor to bf16 (8 significant bits) moves it by
    at most 2^-8 of itself, so a term a_i b_i by at most (2^-7 + 2^-16) |a_i b_i|, and the
    |a_i b_i| sum to at most |a| |b|; each of the two float32 sums of d terms adds at most
    d 2^-24 |a| |b|."""
    return (2**-7 + 2**-16 + 2 * d * 2**-24) * NORM_BOUND**2


@njit(cache=True, nogil=True)
def to_bf16(a):  # pragma: no cover - compiled
    """uint16 bits of float32 ``a`` (C-contiguous, 2-D) rounded to bf16 (to nearest, ties to
    even), with rows of zeros after it up to a multiple of ``ROW_STEP`` rows."""
    m, d = a.shape
    bits = a.reshape(a.size).view(np.uint32)
    out = np.zeros(-(-m // ROW_STEP) * ROW_STEP * d, dtype=np.uint16)
    for i in range(a.size):
        b = bits[i]
        out[i] = (b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    return out.reshape(-1, d)


def products(a: np.ndarray, b: np.ndarray, m: int, n: int) -> np.ndarray:
    """float32 (m, n): the first m rows of ``a`` times the first n rows of ``b`` (transposed),
    each bf16 (``to_bf16``), summed in float32, on one thread. The array is a view of OpenVINO's
    output buffer: it holds until this thread's next call."""
    import openvino

    request = getattr(_local, "request", None)
    if request is None:
        request = _local.request = _compile().create_infer_request()
    request.infer([openvino.Tensor(a, openvino.Shape(list(a.shape)), openvino.Type.bf16),
                   openvino.Tensor(b, openvino.Shape(list(b.shape)), openvino.Type.bf16)])
    return request.get_output_tensor(0).data[:m, :n]


def _compile() -> Any:
    """A one-thread, unpinned model of ``a @ b.T`` for bf16 rows of any shape."""
    import openvino
    from openvino import opset13 as ops

    a = ops.parameter([-1, -1], openvino.Type.bf16)
    b = ops.parameter([-1, -1], openvino.Type.bf16)
    product = ops.matmul(ops.convert(a, "f32"), ops.convert(b, "f32"), False, True)
    config = {"INFERENCE_PRECISION_HINT": "bf16", "INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": 1,
              "ENABLE_CPU_PINNING": False}
    return openvino.Core().compile_model(openvino.Model([product], [a, b]), "CPU", config)


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract", "nsz", "arcp"})
def dot(a, b):  # pragma: no cover - compiled
    """float32 dot product of two float32 rows."""
    v = np.float32(0.0)
    for t in range(a.size):
        v += a[t] * b[t]
    return v

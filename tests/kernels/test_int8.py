"""int8 similarity products: the quantisation against its rounding bound, the onnxruntime product
against numpy's integer product."""

import numpy as np
import pytest

from chunktree.kernels import int8


def unit(n, d, seed):
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("d", [5, 384])
def test_rows_round_to_their_own_step_and_columns_to_the_blocks_one_step(d):
    x = unit(300, d, seed=d)
    x[7] *= 1e-3  # a short row keeps its own, finer, scale on the left; shares the block's on the right
    left, scale_l = int8.quantise_rows(x)
    right, scale_r = int8.quantise_columns(x)
    np.testing.assert_allclose(scale_l, np.abs(x).max(axis=1) / 63, rtol=1e-6)
    assert scale_r == pytest.approx(np.abs(x).max() / 127, rel=1e-6)
    assert left.dtype == np.uint8 and right.dtype == np.int8 and right.shape == (d, 300)
    assert left.max() <= 127  # an AVX2 kernel's int16 pair sums stay exact (test_product_is_exact_at_the_extremes)
    for q, step, top in ((left.astype(np.int64) - 64, scale_l[:, None], 63), (right.T.astype(np.int64), scale_r, 127)):
        assert np.abs(q).max() == top
        assert (np.abs(q * step - x) <= step / 2 * (1 + 1e-5)).all()
    assert np.abs(right[:, 7]).max() <= 1  # the short row is at most one step of the block's scale


def test_a_zero_row_is_quantised_to_zeros():
    x = np.zeros((2, 4), np.float32)
    x[1, 2] = -0.5
    left, _ = int8.quantise_rows(x)
    right, _ = int8.quantise_columns(x)
    assert left[0].tolist() == [64] * 4 and right[:, 0].tolist() == [0] * 4
    assert left[1].tolist() == [64, 64, 1, 64] and right[:, 1].tolist() == [0, 0, -127, 0]
    assert int8.quantise_columns(np.zeros((3, 4), np.float32))[0].tolist() == [[0] * 3] * 4


def test_product_equals_the_integer_product_and_approximates_the_similarities():
    a, b = unit(130, 384, seed=1), unit(257, 384, seed=2)
    left, scale_a = int8.quantise_rows(a)
    right, scale_b = int8.quantise_columns(b)
    y = int8.product(left, right)
    assert y.dtype == np.int32 and y.shape == (130, 257)
    np.testing.assert_array_equal(y, (left.astype(np.int64) - 64) @ right.astype(np.int64))
    approx = y * scale_a[:, None] * scale_b
    exact = a @ b.T
    # |a.b - qa.qb| <= sum |a_j| |err_b_j| + |qb_j| |err_a_j| <= (s_b |a|_1 + s_a |qb|_1) / 2
    qb = right.T.astype(np.float64) * scale_b
    bound = (scale_b * np.abs(a).sum(1)[:, None] + scale_a[:, None] * np.abs(qb).sum(1)[None, :]) / 2
    assert (np.abs(approx - exact) <= bound + 1e-6).all()
    assert np.abs(approx - exact).max() < 5e-3  # the typical error is far inside the bound


def test_product_is_exact_at_the_extremes_of_both_ranges():
    """Rows at 1 and 127 (values -63 and 63), columns at -127 and 127, every sign pattern: the
    products are numpy's integer products, on any CPU (an AVX2 kernel adds each two uint8 x int8
    products in a saturating int16, which rows of up to 255 overflow)."""
    d = 384
    rng = np.random.default_rng(5)
    left = np.where(rng.random((64, d)) < 0.5, 1, 127).astype(np.uint8)
    left[:2] = [[127] * d, [1] * d]
    right = np.where(rng.random((d, 64)) < 0.5, -127, 127).astype(np.int8)
    right[:, :2] = np.array([[127] * d, [-127] * d]).T
    np.testing.assert_array_equal(int8.product(left, right), (left.astype(np.int64) - 64) @ right.astype(np.int64))


def test_the_stored_graph_is_exactly_one_matmulinteger_with_zero_point_64():
    """The product's graph ships serialised (importing onnx costs 0.6 s at run time): it must be
    the graph that onnx.helper builds, field for field."""
    from importlib import resources

    from onnx import TensorProto, checker, helper, load_model_from_string

    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B", "zero"], ["Y"])], "int8_product",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, [None, None]),
         helper.make_tensor_value_info("B", TensorProto.INT8, [None, None])],
        [helper.make_tensor_value_info("Y", TensorProto.INT32, [None, None])],
        initializer=[helper.make_tensor("zero", TensorProto.UINT8, [], [64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    checker.check_model(model)
    stored = (resources.files("chunktree") / "data" / int8.MODEL).read_bytes()
    assert load_model_from_string(stored) == model

"""unit_rows: one copy at most, none for unit float32 rows; errors name the global row."""

import numpy as np
import pytest

from chunktree.checks import unit_rows


def rows(n=300, d=8, seed=0):
    x = np.random.default_rng(seed).standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_unit_float32_rows_are_used_in_place_read_only(tmp_path):
    np.save(tmp_path / "x.npy", rows().astype(np.float32))
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    out = unit_rows(mapped, "embeddings", block=64)
    assert np.shares_memory(out, mapped) and not out.flags.writeable
    in_memory = rows().astype(np.float32)
    same = unit_rows(in_memory, "embeddings")
    assert np.shares_memory(same, in_memory) and not same.flags.writeable
    with pytest.raises(ValueError):
        same[0, 0] = 1.0  # the caller's array cannot be changed through it
    assert in_memory.flags.writeable  # and the caller's own array is untouched


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_other_rows_become_one_normalised_float32_copy(tmp_path, dtype):
    np.save(tmp_path / "x.npy", (3.0 * rows()).astype(dtype))
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    out = unit_rows(mapped, "embeddings", block=64)
    assert out.dtype == np.float32 and out.flags.c_contiguous and not np.shares_memory(out, mapped)
    want = np.asarray(mapped, dtype=np.float64)
    np.testing.assert_allclose(out, want / np.linalg.norm(want, axis=1, keepdims=True), atol=1e-6)


def test_rows_that_turn_out_not_unit_late_are_all_normalised():
    x = rows().astype(np.float32)
    x[250] *= 2.0  # found in the fourth block of 64: the blocks before it were taken as they were
    out = unit_rows(x, "embeddings", block=64)
    assert not np.shares_memory(out, x)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(out[:250], x[:250], atol=1e-6)


def test_errors_name_the_row_in_the_whole_array():
    x = rows().astype(np.float32)
    x[200, 3] = np.nan
    with pytest.raises(ValueError, match=r"embeddings must be finite; found nan at index \(200, 3\)"):
        unit_rows(x, "embeddings", block=64)
    x[200, 3], x[130] = 0.0, 0.0
    with pytest.raises(ValueError, match=r"zero-norm vectors at rows \[130\]"):
        unit_rows(x, "embeddings", block=64)


def test_errors_carry_the_parameter_their_message_begins_with():
    """``ChunktreeError.param`` names the argument a check refused, as the message's first words do,
    so that an application maps it to its own option without reading the message."""
    from chunktree.checks import InvalidTypeError, InvalidValueError, integer, number, one_of, text

    for check, bad in ((lambda: integer(0, "per_cluster", 1), InvalidValueError),
                       (lambda: integer("2", "per_cluster", 1), InvalidTypeError),
                       (lambda: number(float("nan"), "memory_weight", 0.0), InvalidValueError),
                       (lambda: one_of("x", "strategy", ("bfs",)), InvalidValueError),
                       (lambda: text("  ", "query"), InvalidValueError),
                       (lambda: unit_rows(np.zeros((2, 3), np.float32), "embeddings"), InvalidValueError)):
        with pytest.raises(bad) as caught:
            check()
        assert caught.value.param and str(caught.value).startswith(caught.value.param)
    assert InvalidValueError("no parameter here").param is None


def test_normalised_and_is_unit():
    """normalised scales each row (or a vector) to unit norm against numpy's own norm, leaves a zero
    vector zero and keeps the float type; is_unit holds for finite rows within the tolerance only."""
    from chunktree.checks import STORED_UNIT_TOLERANCE, is_unit, normalised

    x = np.array([[3.0, 4.0], [0.0, 0.0], [1e-3, 0.0]], np.float32)
    got = normalised(x)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, [[0.6, 0.8], [0.0, 0.0], [1.0, 0.0]], atol=1e-7)
    np.testing.assert_allclose(normalised(np.array([0.0, 2.0])), [0.0, 1.0])
    assert is_unit(got).tolist() == [True, False, True]
    assert is_unit(np.array([[1.0005, 0.0], [np.nan, 1.0], [np.inf, 0.0]]), STORED_UNIT_TOLERANCE).tolist() == [
        True, False, False]
    assert not is_unit(np.array([1.0005, 0.0]))  # the float32 tolerance is far tighter

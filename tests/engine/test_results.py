"""Strict JSON out of every result (``engine.results.dumps``)."""

import json
from pathlib import Path

import numpy as np

from chunktree.engine.results import dumps


def _strict(text: str):
    def refuse(constant: str):
        raise AssertionError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_dumps_writes_numpy_values_as_numbers_and_non_finite_ones_as_null():
    value = {"a": np.float32(0.5), "b": np.int64(7), "c": np.arange(3), "d": Path("x/y"), "e": "é"}
    assert _strict(dumps(value)) == {"a": 0.5, "b": 7, "c": [0, 1, 2], "d": "x/y", "e": "é"}
    assert "é" in dumps(value)  # UTF-8 kept, not escaped
    bad = {"nan": float("nan"), "deep": [{"inf": np.float32("inf")}], "array": np.array([1.0, np.nan]), "ok": 1.5}
    for indent in (None, 1):
        assert _strict(dumps(bad, indent=indent)) == {"nan": None, "deep": [{"inf": None}], "array": [1.0, None], "ok": 1.5}

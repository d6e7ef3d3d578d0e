"""Every backend and precision: agreement with the PyTorch golden vectors, batch invariance, how
``auto`` chooses (and falls back), the cache that never mixes precisions, threads, and the
token-budget batches."""

import logging
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunktree import Embedder
from chunktree.engine.cache import EmbeddingCache
from chunktree.engine.embedding import embed_texts
from chunktree.models import backends
from chunktree.models.embedder import token_batches

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden_minilm.npz"

# The same text alone, in batches of 8 and 64 and under permutation: the least cosine allowed, per
# path. None of the three is bit for bit: each runtime picks its kernels by shape (measured here:
# onnxruntime fp32 0.99999988, OpenVINO fp32 0.99999982, OpenVINO bf16 0.9999925 on these texts).
# The int8 path runs each window alone and is bit for bit (test_quantize).
BATCH_INVARIANCE = {("onnxruntime", "fp32"): 0.9999995, ("openvino", "fp32"): 0.9999995,
                    ("openvino", "bf16"): 0.99999}
# Least cosine against PyTorch (sentence-transformers) on the golden texts.
AGREEMENT = {("onnxruntime", "fp32"): 0.999999, ("openvino", "fp32"): 0.999999, ("openvino", "bf16"): 0.9999}


def _paths():
    core, _ = backends.openvino_core()
    paths = [("onnxruntime", "fp32")]
    if core is not None:
        paths.append(("openvino", "fp32"))
        if backends.has_bf16_units(core):
            paths.append(("openvino", "bf16"))
    return paths


PATHS = _paths()


@pytest.fixture(scope="module", params=PATHS, ids=["-".join(p) for p in PATHS])
def path_embedder(request):
    backend, precision = request.param
    return Embedder(backend=backend, precision=precision)


def test_every_path_agrees_with_pytorch(path_embedder):
    g = np.load(GOLDEN)
    within = g["tokens"] <= path_embedder.window
    texts = [str(t) for t in g["texts"][within]]
    cosine = np.sum(path_embedder.embed(texts) * g["vectors"][within], axis=1)
    assert cosine.min() >= AGREEMENT[path_embedder.backend, path_embedder.precision], cosine.min()


def test_every_path_is_batch_invariant(path_embedder):
    texts = [f"sentence number {i} " + "whale " * (i * 11 % 70) for i in range(32)]
    alone = np.stack([path_embedder.embed([t])[0] for t in texts])
    perm = np.random.default_rng(0).permutation(len(texts))
    least = BATCH_INVARIANCE[path_embedder.backend, path_embedder.precision]
    for batch_size in (8, 64):
        got = path_embedder.embed(texts, batch_size=batch_size, batch_tokens=10**6)
        assert np.sum(got * alone, axis=1).min() >= least, batch_size
    permuted = path_embedder.embed([texts[i] for i in perm])  # the default token budget
    assert np.sum(permuted * alone[perm], axis=1).min() >= least


def test_the_record_says_what_ran(path_embedder):
    _, stats = embed_texts(["a ship at dawn"], path_embedder)
    assert (stats.backend, stats.precision) == (path_embedder.backend, path_embedder.precision)
    assert stats.choice == path_embedder.choice.reason and stats.model == path_embedder.model_id
    assert path_embedder.vectors_id == f"{path_embedder.model_id}+{path_embedder.backend}-{path_embedder.precision}"


def test_auto_takes_bf16_where_the_cpu_has_it(embedder):
    core, _ = backends.openvino_core()
    assert core is not None  # OpenVINO is in the default install
    want = "bf16" if backends.has_bf16_units(core) else "fp32"
    assert (embedder.backend, embedder.precision) == ("openvino", want)
    assert embedder.choice.reason.startswith("auto: OpenVINO")


def test_without_bf16_units_auto_is_openvino_fp32_and_bf16_is_refused(monkeypatch):
    monkeypatch.setattr(backends, "has_bf16_units", lambda core: False)
    assert backends.choose() == backends.Choice("openvino", "fp32", "auto: OpenVINO fp32, the CPU has no bf16 units")
    with pytest.raises(ValueError, match=r"precision='bf16' needs a CPU with bf16 units.*use 'fp32'"):
        backends.choose("auto", "bf16")


def test_where_openvino_cannot_load_auto_falls_back_with_one_warning(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "openvino", None)  # import openvino raises ImportError
    with caplog.at_level(logging.WARNING):
        e = Embedder()
    assert (e.backend, e.precision) == ("onnxruntime", "fp32")
    assert e.choice.reason.startswith("auto: onnxruntime fp32, OpenVINO is not installed")
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "pip install openvino" in warnings[0].getMessage()
    with pytest.raises(ValueError, match="backend='openvino' cannot load: OpenVINO is not installed"):
        backends.choose("openvino")


def test_impossible_combinations_are_refused_before_loading():
    for backend, precision, message in (
            ("onnxruntime", "bf16", r"precision='bf16' needs backend 'openvino' or 'auto'"),
            ("openvino", "int8", r"precision='int8' runs on backend 'onnxruntime'"),
            ("torch", "auto", r"backend must be one of \['auto', 'onnxruntime', 'openvino'\]; got 'torch'"),
            ("auto", "fp16", r"precision must be one of \['auto', 'fp32', 'bf16', 'int8'\]; got 'fp16'")):
        with pytest.raises(ValueError, match=message):
            Embedder("no-such-model", backend=backend, precision=precision)  # the model is never looked up


@pytest.mark.skipif(len(PATHS) < 3, reason="this CPU has no bf16 units")
def test_the_cache_never_serves_one_precision_for_another(tmp_path):
    bf16, fp32 = Embedder(precision="bf16"), Embedder(backend="onnxruntime")
    texts = ["the white whale", "a ship at dawn"]
    with EmbeddingCache(tmp_path / "c.sqlite") as cache:
        first, _ = embed_texts(texts, bf16, cache)
        other, stats = embed_texts(texts, fp32, cache)
        assert (stats.cache_hits, stats.embedded) == (0, 2) and not np.array_equal(first, other)
        again, stats = embed_texts(texts, bf16, cache)
        assert stats.cache_hits == 2 and np.array_equal(again, first)
        again, stats = embed_texts(texts, fp32, cache)
        assert stats.cache_hits == 2 and np.array_equal(again, other)


def test_threads_are_the_same_setting_for_every_backend(path_embedder):
    assert path_embedder.threads == backends.physical_cores()  # the default
    assert Embedder(backend=path_embedder.backend, precision=path_embedder.precision, threads=1).threads == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 300), min_size=0, max_size=80), st.integers(1, 20), st.integers(1, 3000))
def test_token_batches_pack_sorted_windows_up_to_the_budget(lengths, batch_size, batch_tokens):
    lengths = np.array(lengths, dtype=np.int64)
    batches = token_batches(lengths, batch_size, batch_tokens)
    flat = np.concatenate(batches) if batches else np.array([], np.int64)
    assert sorted(flat.tolist()) == list(range(lengths.size))  # every window once
    assert np.array_equal(lengths[flat], np.sort(lengths))  # shortest first
    for i, b in enumerate(batches):
        width = lengths[b].max()
        assert len(b) <= batch_size and (len(b) == 1 or len(b) * width <= batch_tokens)
        if i + 1 < len(batches):  # greedy: the next window would have broken a limit
            nxt = lengths[batches[i + 1][0]]
            assert len(b) == batch_size or (len(b) + 1) * max(width, nxt) > batch_tokens


def test_passes_are_padded_to_the_sessions_multiple_and_the_vectors_do_not_change():
    e = Embedder(backend="onnxruntime")
    texts = ["a ship", "whale " * 150, "sea " * 249, "the grey whale rose beside the ship at dawn"]
    plain = e.embed(texts)
    widths, run = [], e._session.run

    def recording(input_ids, attention_mask):
        widths.append(input_ids.shape[1])
        return run(input_ids, attention_mask)

    e._session.run = recording
    e._session.pad_multiple = 100  # the window (256) is not a multiple: the longest pass stops at it
    e._session.pad_from = 5  # "a ship" (4 tokens) runs as it is
    padded = e.embed(texts, batch_size=1)
    lengths = [len(x.ids) for x in e._window_tokenizer.encode_batch(texts)]
    assert sorted(widths) == [4, 100, 200, 256] and lengths[0] == 4
    assert np.sum(padded * plain, axis=1).min() >= BATCH_INVARIANCE["onnxruntime", "fp32"]

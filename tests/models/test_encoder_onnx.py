"""The ONNX graph built from weights, against a plain numpy BERT forward pass on random weights."""

import math

import numpy as np
import onnxruntime as ort
import pytest
from scipy.special import erf

from chunktree.models.encoder_onnx import build_encoder_onnx

CONFIG = {"hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 48,
          "layer_norm_eps": 1e-12, "hidden_act": "gelu", "vocab_size": 50, "max_position_embeddings": 40}


def random_weights(seed=0):
    rng = np.random.default_rng(seed)
    h, i = CONFIG["hidden_size"], CONFIG["intermediate_size"]

    def t(*shape):
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    w = {"embeddings.word_embeddings.weight": t(CONFIG["vocab_size"], h),
         "embeddings.position_embeddings.weight": t(CONFIG["max_position_embeddings"], h),
         "embeddings.token_type_embeddings.weight": t(2, h),
         "embeddings.LayerNorm.weight": 1 + t(h), "embeddings.LayerNorm.bias": t(h)}
    for layer in range(CONFIG["num_hidden_layers"]):
        p = f"encoder.layer.{layer}"
        for name in ("query", "key", "value"):
            w[f"{p}.attention.self.{name}.weight"], w[f"{p}.attention.self.{name}.bias"] = t(h, h), t(h)
        w[f"{p}.attention.output.dense.weight"], w[f"{p}.attention.output.dense.bias"] = t(h, h), t(h)
        w[f"{p}.attention.output.LayerNorm.weight"], w[f"{p}.attention.output.LayerNorm.bias"] = 1 + t(h), t(h)
        w[f"{p}.intermediate.dense.weight"], w[f"{p}.intermediate.dense.bias"] = t(i, h), t(i)
        w[f"{p}.output.dense.weight"], w[f"{p}.output.dense.bias"] = t(h, i), t(h)
        w[f"{p}.output.LayerNorm.weight"], w[f"{p}.output.LayerNorm.bias"] = 1 + t(h), t(h)
    return w


def numpy_bert(w, ids, mask):
    """Textbook BERT + mean pooling + L2 normalisation, one sequence at a time, in float64."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    heads, h = CONFIG["num_attention_heads"], CONFIG["hidden_size"]
    d = h // heads

    def ln(x, p):
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-12) * w[f"{p}.weight"] + w[f"{p}.bias"]

    def lin(x, p):
        return x @ w[f"{p}.weight"].T + w[f"{p}.bias"]

    out = []
    for seq, m in zip(ids, mask):
        n = int(m.sum())  # padding is on the right; only real tokens take part
        seq = seq[:n]
        x = ln(w["embeddings.word_embeddings.weight"][seq] + w["embeddings.position_embeddings.weight"][:n]
               + w["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
        for layer in range(CONFIG["num_hidden_layers"]):
            p = f"encoder.layer.{layer}"
            q, k, v = (lin(x, f"{p}.attention.self.{s}").reshape(n, heads, d).transpose(1, 0, 2)
                       for s in ("query", "key", "value"))
            s = q @ k.transpose(0, 2, 1) / math.sqrt(d)
            s = np.exp(s - s.max(-1, keepdims=True))
            ctx = (s / s.sum(-1, keepdims=True)) @ v
            x = ln(lin(ctx.transpose(1, 0, 2).reshape(n, h), f"{p}.attention.output.dense") + x,
                   f"{p}.attention.output.LayerNorm")
            g = lin(x, f"{p}.intermediate.dense")
            g = 0.5 * g * (1 + erf(g / math.sqrt(2)))
            x = ln(lin(g, f"{p}.output.dense") + x, f"{p}.output.LayerNorm")
        pooled = x.mean(0)
        out.append(pooled / np.linalg.norm(pooled))
    return np.array(out)


@pytest.fixture(scope="module")
def tiny():
    w = random_weights()
    model = build_encoder_onnx(w, CONFIG, metadata={"note": "tiny"})
    return w, model, ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def batch(lengths, seed=1):
    rng = np.random.default_rng(seed)
    width = max(lengths)
    ids = np.zeros((len(lengths), width), np.int64)
    mask = np.zeros((len(lengths), width), np.int64)
    for r, n in enumerate(lengths):
        ids[r, :n] = rng.integers(1, CONFIG["vocab_size"], n)
        mask[r, :n] = 1
    return ids, mask


def test_matches_numpy_reference_with_padding(tiny):
    w, _, sess = tiny
    ids, mask = batch([1, 5, 17, 40])
    (got,) = sess.run(None, {"input_ids": ids, "attention_mask": mask})
    want = numpy_bert(w, ids, mask)
    assert got.dtype == np.float32 and got.shape == (4, CONFIG["hidden_size"])
    np.testing.assert_allclose(got, want, atol=2e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)


def test_padding_does_not_change_a_sequence(tiny):
    _, _, sess = tiny
    ids, mask = batch([6, 30])
    (padded,) = sess.run(None, {"input_ids": ids, "attention_mask": mask})
    (alone,) = sess.run(None, {"input_ids": ids[:1, :6], "attention_mask": mask[:1, :6]})
    np.testing.assert_allclose(padded[0], alone[0], atol=1e-6)


def test_metadata_is_stored(tiny):
    _, model, _ = tiny
    assert {p.key: p.value for p in model.metadata_props} == {"note": "tiny"}


def test_accepts_bert_prefix(tiny):
    _, _, sess = tiny
    w = {f"bert.{k}": v for k, v in random_weights().items()}
    prefixed = ort.InferenceSession(build_encoder_onnx(w, CONFIG).SerializeToString(),
                                    providers=["CPUExecutionProvider"])
    ids, mask = batch([5, 9])
    feeds = {"input_ids": ids, "attention_mask": mask}
    np.testing.assert_array_equal(prefixed.run(None, feeds)[0], sess.run(None, feeds)[0])


def test_missing_tensor_is_named():
    w = random_weights()
    del w["encoder.layer.1.output.dense.bias"]
    with pytest.raises(ValueError, match=r"encoder.layer.1.output.dense.bias"):
        build_encoder_onnx(w, CONFIG)


def test_rejects_other_activations():
    with pytest.raises(ValueError, match=r"hidden_act must be 'gelu'.*'relu'"):
        build_encoder_onnx(random_weights(), {**CONFIG, "hidden_act": "relu"})

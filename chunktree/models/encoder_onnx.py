"""Build a sentence-embedding ONNX graph straight from safetensors weights, without torch.

The graph computes what sentence-transformers computes for the encoder families that carry most
sentence-embedding models: embeddings -> N x (self-attention, feed-forward) -> pooling -> L2
normalisation, for

- ``bert``: absolute positions from 0, token type 0 (all-MiniLM, bge, e5, gte...);
- ``roberta``, ``xlm-roberta``, ``camembert``: positions counted from ``pad_token_id + 1`` over the
  real tokens (multilingual-e5, paraphrase-multilingual, bge-m3's encoder...);
- ``mpnet``: RoBERTa's positions and, in every layer, a learned bias by bucketed relative position
  (all-mpnet-base-v2...).

Pooling is ``mean`` over the real tokens, ``cls`` (the first token) or ``lasttoken`` (the last real
token). The output is always L2-normalised: chunktree compares vectors by cosine.

Inputs
    input_ids       int64 (batch, seq)
    attention_mask  int64 (batch, seq), 1 for real tokens, 0 for padding
Output
    sentence_embedding  float32 (batch, hidden), unit L2 norm

Only standard ONNX operators (opset 18) are used; onnxruntime's graph optimiser fuses the
LayerNorm, Gelu and bias patterns at load time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from chunktree.checks import InvalidValueError

FAMILIES = ("bert", "roberta", "xlm-roberta", "camembert", "mpnet")
POOLINGS = ("mean", "cls", "lasttoken")
# Prefixes a checkpoint's tensors may carry (saved from a task model rather than the bare encoder).
_PREFIXES = ("bert.", "roberta.", "xlm_roberta.", "mpnet.", "model.")
OPSET = 18
# Additive bias for padded key positions. Any value whose exp() underflows to 0 in float32 gives
# the same softmax as the -inf of the reference; a finite value keeps all-padding rows NaN-free.
_MASK_BIAS = -1.0e9


def _require(weights: Mapping[str, np.ndarray], name: str, family: str) -> np.ndarray:
    if name not in weights:
        raise InvalidValueError(f"the weights lack the tensor {name!r} that a {family} encoder has; is this a "
                                f"{family} checkpoint (config.json's model_type)?")
    return np.ascontiguousarray(weights[name], dtype=np.float32)


def relative_buckets(n: int, buckets: int = 32, max_distance: int = 128) -> np.ndarray:
    """MPNet's bucket of each (query, key) pair of ``n`` positions: int64 (n, n), as
    ``MPNetEncoder.relative_position_bucket`` computes it (in float32, as torch does)."""
    relative = np.arange(n)[None, :] - np.arange(n)[:, None]  # key - query
    m = -relative
    half = buckets // 2
    out = (m < 0).astype(np.int64) * half
    m = np.abs(m)
    exact = half // 2
    far = np.maximum(m, exact).astype(np.float32)  # the near ones take ``m`` below; no log of 0
    large = exact + (np.log(far / np.float32(exact)) / np.float32(math.log(max_distance / exact))
                     * np.float32(half - exact)).astype(np.int64)
    large = np.minimum(large, half - 1)
    return out + np.where(m < exact, m, large)


def build_encoder_onnx(
    weights: Mapping[str, np.ndarray],
    config: Mapping[str, Any],
    pooling: str = "mean",
    metadata: Mapping[str, str] | None = None,
) -> Any:
    """Return an ``onnx.ModelProto`` for an encoder with ``pooling`` and L2 normalisation.

    Parameters
    ----------
    weights
        Tensors named as in the Hugging Face checkpoint of the family (``embeddings.*``,
        ``encoder.layer.{i}.*``), optionally prefixed (``bert.``, ``roberta.``...).
    config
        The checkpoint's ``config.json``: ``model_type`` (one of ``FAMILIES``; ``bert`` if absent),
        ``hidden_size``, ``num_attention_heads``, ``num_hidden_layers``, ``layer_norm_eps``,
        ``hidden_act`` (``gelu`` only), ``pad_token_id`` (RoBERTa and MPNet positions).
    pooling
        one of ``POOLINGS``.
    metadata
        String key/value pairs stored in the model's ``metadata_props``.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    family = str(config.get("model_type", "bert"))
    if family not in FAMILIES:
        raise InvalidValueError(f"model_type {family!r} is not an encoder chunktree builds; it builds {list(FAMILIES)}")
    if pooling not in POOLINGS:
        raise InvalidValueError(f"pooling must be one of {list(POOLINGS)}; got {pooling!r}")
    for prefix in _PREFIXES:
        if any(k.startswith(prefix + "embeddings.") for k in weights):
            weights = {k.removeprefix(prefix): v for k, v in weights.items()}
            break
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    layers = int(config["num_hidden_layers"])
    eps = float(config.get("layer_norm_eps", 1e-12))
    act = config.get("hidden_act", "gelu")
    if act != "gelu":
        raise InvalidValueError(f"hidden_act must be 'gelu' (exact erf GELU); got {act!r}")
    if hidden % heads:
        raise InvalidValueError(f"hidden_size={hidden} is not divisible by num_attention_heads={heads}")
    head_dim = hidden // heads
    mpnet = family == "mpnet"
    counted_positions = family != "bert"  # RoBERTa's: pad_token_id + 1 onwards, over the real tokens

    def w(name: str) -> np.ndarray:
        return _require(weights, name, family)

    nodes: list[Any] = []
    inits: list[Any] = []
    counter = [0]

    named: set[str] = set()

    def const(name: str, value: np.ndarray) -> str:
        """An initializer, added once however often it is asked for (only what the graph uses is kept)."""
        if name not in named:
            named.add(name)
            inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(op: str, inputs: list[str], **attrs: Any) -> str:
        counter[0] += 1
        out = f"{op.lower()}_{counter[0]}"
        nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def linear(x: str, prefix: str) -> str:
        weight = const(f"{prefix}.weight_t", w(f"{prefix}.weight").T.copy())
        bias = const(f"{prefix}.bias", w(f"{prefix}.bias"))
        return node("Add", [node("MatMul", [x, weight]), bias])

    def layer_norm(x: str, prefix: str) -> str:
        g = const(f"{prefix}.weight", w(f"{prefix}.weight"))
        b = const(f"{prefix}.bias", w(f"{prefix}.bias"))
        return node("LayerNormalization", [x, g, b], axis=-1, epsilon=eps)

    seq_len = node("Gather", [node("Shape", ["input_ids"]), const("one_i64", np.array([1], np.int64))])
    mask = node("Cast", ["attention_mask"], to=TensorProto.FLOAT)

    # Embeddings: word + position (+ token type 0), then LayerNorm.
    word = node("Gather", [const("word_embeddings", w("embeddings.word_embeddings.weight")), "input_ids"])
    position_table = const("position_embeddings", w("embeddings.position_embeddings.weight"))
    if counted_positions:
        pad = int(config.get("pad_token_id", 1))
        real = node("Cast", [node("Not", [node("Equal", ["input_ids", const("pad_id", np.array(pad, np.int64))])])],
                    to=TensorProto.INT64)
        ids = node("Add", [node("Mul", [node("CumSum", [real, const("axis1_scalar", np.array(1, np.int64))]), real]),
                           const("pad_offset", np.array(pad, np.int64))])
        positions = node("Gather", [position_table, ids])
    else:
        positions = node("Slice", [position_table, const("zero_i64", np.array([0], np.int64)), seq_len,
                                   const("axis0_i64", np.array([0], np.int64))])
    x = node("Add", [word, positions])
    if not mpnet:
        x = node("Add", [x, const("token_type_0", w("embeddings.token_type_embeddings.weight")[0])])
    x = layer_norm(x, "embeddings.LayerNorm")

    # (batch, 1, 1, seq): 0 where attended, _MASK_BIAS where padded.
    bias = node("Unsqueeze", [node("Mul", [node("Sub", [const("one_f", np.array(1.0, np.float32)), mask]),
                                           const("mask_bias", np.array(_MASK_BIAS, np.float32))]),
                              const("axes_1_2", np.array([1, 2], np.int64))])
    if mpnet:  # one relative-position bias (1, heads, seq, seq) shared by every layer
        window = int(w("embeddings.position_embeddings.weight").shape[0])
        table = w("encoder.relative_attention_bias.weight")  # (buckets, heads)
        buckets = const("relative_buckets", relative_buckets(window, table.shape[0]))
        pair = node("Slice", [buckets, const("zeros_2", np.array([0, 0], np.int64)),
                              node("Concat", [seq_len, seq_len], axis=0), const("axes01", np.array([0, 1], np.int64))])
        relative = node("Unsqueeze", [node("Transpose", [node("Gather", [const("relative_bias", table), pair])],
                                           perm=[2, 0, 1]), const("axis0_i64", np.array([0], np.int64))])
        bias = node("Add", [bias, relative])
    split_heads = const("split_heads", np.array([0, 0, heads, head_dim], np.int64))
    merge_heads = const("merge_heads", np.array([0, 0, hidden], np.int64))
    scale = const("attn_scale", np.array(1.0 / math.sqrt(head_dim), np.float32))
    inv_sqrt2 = const("inv_sqrt2", np.array(1.0 / math.sqrt(2.0), np.float32))
    half = const("half", np.array(0.5, np.float32))
    names = ({"q": "attention.attn.q", "k": "attention.attn.k", "v": "attention.attn.v", "o": "attention.attn.o",
              "norm": "attention.LayerNorm"} if mpnet else
             {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
              "o": "attention.output.dense", "norm": "attention.output.LayerNorm"})

    for i in range(layers):
        p = f"encoder.layer.{i}"
        q = node("Transpose", [node("Reshape", [linear(x, f"{p}.{names['q']}"), split_heads])], perm=[0, 2, 1, 3])
        k = node("Transpose", [node("Reshape", [linear(x, f"{p}.{names['k']}"), split_heads])], perm=[0, 2, 3, 1])
        v = node("Transpose", [node("Reshape", [linear(x, f"{p}.{names['v']}"), split_heads])], perm=[0, 2, 1, 3])
        scores = node("Add", [node("Mul", [node("MatMul", [q, k]), scale]), bias])
        context = node("MatMul", [node("Softmax", [scores], axis=-1), v])
        context = node("Reshape", [node("Transpose", [context], perm=[0, 2, 1, 3]), merge_heads])
        x = layer_norm(node("Add", [linear(context, f"{p}.{names['o']}"), x]), f"{p}.{names['norm']}")
        h = linear(x, f"{p}.intermediate.dense")
        h = node("Mul", [node("Mul", [h, half]),
                         node("Add", [node("Erf", [node("Mul", [h, inv_sqrt2])]), const(f"one_f_{i}", np.array(1.0, np.float32))])])
        x = layer_norm(node("Add", [linear(h, f"{p}.output.dense"), x]), f"{p}.output.LayerNorm")

    axis1 = const("axis1", np.array([1], np.int64))
    mask3 = node("Unsqueeze", [mask, const("axis2", np.array([2], np.int64))])
    if pooling == "mean":  # over real tokens
        summed = node("ReduceSum", [node("Mul", [x, mask3]), axis1], keepdims=0)
        count = node("Max", [node("ReduceSum", [mask3, axis1], keepdims=0),
                             const("count_eps", np.array(1e-9, np.float32))])
        pooled = node("Div", [summed, count])
    elif pooling == "cls":
        pooled = node("Squeeze", [node("Gather", [x, const("zero_i64", np.array([0], np.int64))], axis=1), axis1])
    else:  # lasttoken: where the running count of real tokens reaches their total
        running = node("CumSum", [mask, const("axis1_scalar_f", np.array(1, np.int64))])
        last = node("Mul", [node("Cast", [node("Equal", [running, node("ReduceSum", [mask, axis1], keepdims=1)])],
                                 to=TensorProto.FLOAT), mask])
        pooled = node("ReduceSum", [node("Mul", [x, node("Unsqueeze", [last, const("axis2b", np.array([2], np.int64))])]),
                                    axis1], keepdims=0)
    # L2 normalisation, as torch.nn.functional.normalize (eps 1e-12).
    norm = node("Max", [node("Sqrt", [node("ReduceSumSquare", [pooled, axis1], keepdims=1)]),
                        const("norm_eps", np.array(1e-12, np.float32))])
    nodes.append(helper.make_node("Div", [pooled, norm], ["sentence_embedding"]))

    graph = helper.make_graph(
        nodes,
        f"{family}_{pooling}_pooling",
        inputs=[helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
                helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])],
        outputs=[helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", hidden])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="chunktree")
    model.ir_version = 8
    for key, value in (metadata or {}).items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.checker.check_model(model)
    return model

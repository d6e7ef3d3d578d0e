"""Build a BERT sentence-embedding ONNX graph straight from safetensors weights, without torch.

The graph computes what sentence-transformers computes for a BERT encoder with mean pooling:
embeddings -> N x (self-attention, feed-forward) -> mean over the attention mask -> L2 normalisation.

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

OPSET = 18
# Additive bias for padded key positions. Any value whose exp() underflows to 0 in float32 gives
# the same softmax as the -inf of the reference; a finite value keeps all-padding rows NaN-free.
_MASK_BIAS = -1.0e9


def _require(weights: Mapping[str, np.ndarray], name: str) -> np.ndarray:
    if name not in weights:
        raise InvalidValueError(f"BERT weights are missing tensor {name!r}; is this a BERT-family checkpoint?")
    return np.ascontiguousarray(weights[name], dtype=np.float32)


def build_bert_onnx(
    weights: Mapping[str, np.ndarray],
    config: Mapping[str, Any],
    metadata: Mapping[str, str] | None = None,
) -> Any:
    """Return an ``onnx.ModelProto`` for a BERT encoder with mean pooling and L2 normalisation.

    Parameters
    ----------
    weights
        Tensors named as in a Hugging Face ``BertModel`` checkpoint (``embeddings.*``,
        ``encoder.layer.{i}.*``), optionally prefixed with ``bert.``.
    config
        The checkpoint's ``config.json``: ``hidden_size``, ``num_attention_heads``,
        ``num_hidden_layers``, ``layer_norm_eps``, ``hidden_act`` (``gelu`` only).
    metadata
        String key/value pairs stored in the model's ``metadata_props``.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = {k.removeprefix("bert."): v for k, v in weights.items()}
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

    nodes: list[Any] = []
    inits: list[Any] = []
    counter = [0]

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(op: str, inputs: list[str], **attrs: Any) -> str:
        counter[0] += 1
        out = f"{op.lower()}_{counter[0]}"
        nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def linear(x: str, prefix: str) -> str:
        w = const(f"{prefix}.weight_t", _require(weights, f"{prefix}.weight").T.copy())
        b = const(f"{prefix}.bias", _require(weights, f"{prefix}.bias"))
        return node("Add", [node("MatMul", [x, w]), b])

    def layer_norm(x: str, prefix: str) -> str:
        g = const(f"{prefix}.weight", _require(weights, f"{prefix}.weight"))
        b = const(f"{prefix}.bias", _require(weights, f"{prefix}.bias"))
        return node("LayerNormalization", [x, g, b], axis=-1, epsilon=eps)

    # Embeddings: word + position[:seq] + token_type[0], then LayerNorm.
    word = node("Gather", [const("word_embeddings", _require(weights, "embeddings.word_embeddings.weight")),
                           "input_ids"])
    seq_len = node("Gather", [node("Shape", ["input_ids"]), const("one_i64", np.array([1], np.int64))])
    positions = node("Slice", [const("position_embeddings", _require(weights, "embeddings.position_embeddings.weight")),
                               const("zero_i64", np.array([0], np.int64)), seq_len,
                               const("axis0_i64", np.array([0], np.int64))])
    token_type = const("token_type_0", _require(weights, "embeddings.token_type_embeddings.weight")[0])
    x = layer_norm(node("Add", [node("Add", [word, positions]), token_type]), "embeddings.LayerNorm")

    mask = node("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    # (batch, 1, 1, seq): 0 where attended, _MASK_BIAS where padded.
    bias = node("Unsqueeze", [node("Mul", [node("Sub", [const("one_f", np.array(1.0, np.float32)), mask]),
                                           const("mask_bias", np.array(_MASK_BIAS, np.float32))]),
                              const("axes_1_2", np.array([1, 2], np.int64))])
    split_heads = const("split_heads", np.array([0, 0, heads, head_dim], np.int64))
    merge_heads = const("merge_heads", np.array([0, 0, hidden], np.int64))
    scale = const("attn_scale", np.array(1.0 / math.sqrt(head_dim), np.float32))
    inv_sqrt2 = const("inv_sqrt2", np.array(1.0 / math.sqrt(2.0), np.float32))
    half = const("half", np.array(0.5, np.float32))

    for i in range(layers):
        p = f"encoder.layer.{i}"
        q = node("Transpose", [node("Reshape", [linear(x, f"{p}.attention.self.query"), split_heads])],
                 perm=[0, 2, 1, 3])
        k = node("Transpose", [node("Reshape", [linear(x, f"{p}.attention.self.key"), split_heads])],
                 perm=[0, 2, 3, 1])
        v = node("Transpose", [node("Reshape", [linear(x, f"{p}.attention.self.value"), split_heads])],
                 perm=[0, 2, 1, 3])
        scores = node("Add", [node("Mul", [node("MatMul", [q, k]), scale]), bias])
        context = node("MatMul", [node("Softmax", [scores], axis=-1), v])
        context = node("Reshape", [node("Transpose", [context], perm=[0, 2, 1, 3]), merge_heads])
        x = layer_norm(node("Add", [linear(context, f"{p}.attention.output.dense"), x]),
                       f"{p}.attention.output.LayerNorm")
        h = linear(x, f"{p}.intermediate.dense")
        h = node("Mul", [node("Mul", [h, half]),
                         node("Add", [node("Erf", [node("Mul", [h, inv_sqrt2])]), const(f"one_f_{i}", np.array(1.0, np.float32))])])
        x = layer_norm(node("Add", [linear(h, f"{p}.output.dense"), x]), f"{p}.output.LayerNorm")

    # Mean pooling over real tokens, then L2 normalisation (as torch.nn.functional.normalize, eps 1e-12).
    mask3 = node("Unsqueeze", [mask, const("axis2", np.array([2], np.int64))])
    axis1 = const("axis1", np.array([1], np.int64))
    summed = node("ReduceSum", [node("Mul", [x, mask3]), axis1], keepdims=0)
    count = node("Max", [node("ReduceSum", [mask3, axis1], keepdims=0), const("count_eps", np.array(1e-9, np.float32))])
    mean = node("Div", [summed, count])
    norm = node("Max", [node("Sqrt", [node("ReduceSumSquare", [mean, axis1], keepdims=1)]),
                        const("norm_eps", np.array(1e-12, np.float32))])
    nodes.append(helper.make_node("Div", [mean, norm], ["sentence_embedding"]))

    graph = helper.make_graph(
        nodes,
        "bert_mean_pooling",
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

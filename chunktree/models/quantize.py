"""The int8 variant of an fp32 embedding graph (``Embedder(precision="int8")``, ``--precision int8``).

onnxruntime's dynamic quantisation, with per-channel int8 weights, of every MatMul by a weight
matrix except the feed-forward down-projections (``output.dense``) of the first two layers, which
stay fp32. The weights take 7 bits (``reduce_range``): onnxruntime's uint8 x int8 kernel on a CPU
with AVX2 but no VNNI adds each two products in a saturating int16, which full-range weights
overflow; 7 bits keep every such sum in range on any CPU (tests/models/test_quantize.py holds
the agreement with fp32). The activation scales are computed at run
time over the whole input tensor, so the ``Embedder`` runs each window of an int8 model alone
(the model file says so under ``META_WINDOWS_ALONE``). A window's scales then come from that
window only, and a text embeds bit for bit the same alone or inside any batch.

The two down-projections kept in fp32 are the layers whose quantisation cost the most agreement
with fp32 (min cosine on real chunks); ``tests/models/test_quantize.py`` checks that agreement
(>= 0.99) on real texts, and ``bench/bench_embed.py`` (test_agreement, test_throughput) measures it
and the speed.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
from pathlib import Path

from chunktree.checks import InvalidValueError
from chunktree.models.onnx_file import META_MODEL_ID, META_NAME, META_WINDOWS_ALONE, write_model
from chunktree.paths import cache_dir

log = logging.getLogger(__name__)

# Bump when the recipe below changes, so stale cached builds are not reused.
QUANT_VERSION = 2
# Weight matrices kept in fp32: the down-projections whose quantisation cost the most agreement.
FP32_WEIGHTS = ("encoder.layer.0.output.dense.weight_t", "encoder.layer.1.output.dense.weight_t")


def int8_path(fp32_path: Path) -> Path:
    """The int8 graph of the fp32 file ``fp32_path``, built into the cache directory on first use
    (once per file: the name holds a digest of the file's path, size and modification time)."""
    stat = fp32_path.stat()
    key = hashlib.sha256(f"{fp32_path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    target = cache_dir() / "models" / f"{fp32_path.stem}-{key}-int8-q{QUANT_VERSION}.onnx"
    if target.is_file():
        return target
    return build_int8(fp32_path, target)


def build_int8(fp32_path: Path, target: Path) -> Path:
    """Quantise the fp32 graph at ``fp32_path`` into ``target`` (atomically) and return
    ``target``; its model id and name are the fp32 model's with ``-int8``. A file that is an int8
    graph already is returned as it is."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load(str(fp32_path))
    meta = {p.key: p.value for p in model.metadata_props}
    if meta.get(META_WINDOWS_ALONE) == "1":
        return fp32_path
    if META_MODEL_ID not in meta:
        raise InvalidValueError(f"model file {fp32_path} lacks the metadata {META_MODEL_ID}; write it with "
                                "'chunktree export'")
    log.info("quantising %s to int8 (once per machine)", fp32_path.name)
    name = meta.get(META_NAME, fp32_path.stem) + "-int8"
    for node in model.graph.node:  # quantize_dynamic excludes nodes by name
        node.name = node.name or node.output[0]
    keep = [n.name for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in FP32_WEIGHTS]
    if len(keep) != len(FP32_WEIGHTS):
        raise RuntimeError(f"{fp32_path}: expected the weights {FP32_WEIGHTS}; found {len(keep)} of them")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as work:
        named, quantised = Path(work) / "named.onnx", Path(work) / "int8.onnx"
        onnx.save(model, str(named))
        quantize_dynamic(str(named), str(quantised), weight_type=QuantType.QInt8, per_channel=True,
                         reduce_range=True, op_types_to_quantize=["MatMul"], nodes_to_exclude=keep)
        out = onnx.load(str(quantised))
        meta.update({META_MODEL_ID: f"{name}@{meta[META_MODEL_ID].split('@', 1)[1]}+q{QUANT_VERSION}",
                     META_NAME: name, META_WINDOWS_ALONE: "1"})
        del out.metadata_props[:]
        for key, value in meta.items():
            entry = out.metadata_props.add()
            entry.key, entry.value = key, value
        write_model(out, target)
    return target

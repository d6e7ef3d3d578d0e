"""The runtimes that run an embedding graph, and how ``auto`` picks one.

Two backends run the same self-describing ONNX file (``onnx_file``):

- ``onnxruntime``: fp32, and the int8 graph of ``quantize``;
- ``openvino``: fp32, and bf16 on CPUs with bf16 units (AVX-512 BF16, AMX). OpenVINO reads the
  ONNX file directly with its runtime (``Core.read_model``); chunktree never calls its model
  converter, the only part of OpenVINO that sends telemetry.

``choose(backend, precision)`` resolves ``"auto"`` before anything is loaded; ``open_session``
loads the file. Both sessions run on the same number of threads (``threads``; by default
``cpu.physical_cores()``) and are safe to call from several threads at once.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from chunktree.checks import InvalidValueError, one_of
from chunktree.cpu import has_amx, has_bf16_units, openvino_core, physical_cores

log = logging.getLogger(__name__)

BACKENDS = ("auto", "onnxruntime", "openvino")
PRECISIONS = ("auto", "fp32", "bf16", "int8")


@dataclass(frozen=True)
class Choice:
    """The backend and precision an ``Embedder`` runs on, and why.

    Attributes
    ----------
    backend
        ``"onnxruntime"`` or ``"openvino"``.
    precision
        ``"fp32"``, ``"bf16"`` or ``"int8"``.
    reason
        one line saying why, e.g. ``"auto: OpenVINO bf16, the CPU has bf16 units"``.
    """

    backend: str
    precision: str
    reason: str


def choose(backend: str = "auto", precision: str = "auto") -> Choice:
    """Resolve ``backend`` and ``precision`` (each may be ``"auto"``) for this machine.

    ``auto`` takes the fastest path that keeps agreement with the fp32 model: OpenVINO bf16 where
    the CPU has bf16 units, otherwise OpenVINO fp32; onnxruntime fp32 where OpenVINO cannot load
    (with one warning). ``int8`` is the quantised graph on onnxruntime. Raises
    ``InvalidValueError`` for a combination that cannot run here, before any model is loaded.
    """
    one_of(backend, "backend", BACKENDS)
    one_of(precision, "precision", PRECISIONS)
    if precision == "int8":
        if backend == "openvino":
            raise InvalidValueError("precision='int8' runs on backend 'onnxruntime' (the quantised graph of "
                                    "models.quantize); with backend 'openvino' use 'bf16' or 'fp32'")
        return Choice("onnxruntime", "int8", "int8: the quantised graph, on onnxruntime")
    if backend == "onnxruntime":
        if precision == "bf16":
            raise InvalidValueError("precision='bf16' needs backend 'openvino' or 'auto'; onnxruntime runs this "
                                    "model in 'fp32' or 'int8'")
        return Choice("onnxruntime", "fp32", "asked for onnxruntime fp32")
    core, why_not = openvino_core()
    if core is None:
        if backend == "openvino":
            raise InvalidValueError(f"backend='openvino' cannot load: {why_not}")
        if precision == "bf16":
            raise InvalidValueError(f"precision='bf16' needs OpenVINO, which cannot load: {why_not}")
        log.warning("embedding with onnxruntime fp32: %s", why_not)
        return Choice("onnxruntime", "fp32", f"auto: onnxruntime fp32, {why_not}")
    bf16 = has_bf16_units(core)
    if precision == "bf16" and not bf16:
        raise InvalidValueError("precision='bf16' needs a CPU with bf16 units (AVX-512 BF16 or AMX); OpenVINO lists "
                                f"{core.get_property('CPU', 'OPTIMIZATION_CAPABILITIES')} here: use 'fp32'")
    if precision == "auto":
        if bf16:
            return Choice("openvino", "bf16", "auto: OpenVINO bf16, the CPU has bf16 units")
        return Choice("openvino", "fp32", "auto: OpenVINO fp32, the CPU has no bf16 units")
    return Choice("openvino", precision, f"asked for {precision}" + ("" if backend == "openvino" else ", on OpenVINO"))


# bf16 passes on AMX run faster when the sequence length is a multiple of AMX_PAD_MULTIPLE (an
# AMX tile holds 16 rows) for windows of AMX_PAD_FROM tokens or more; a short sentence alone ran
# slower padded, and so do the fp32 paths. bench/bench_batching.py measures auto with and without
# the padding ("auto-unpadded").
AMX_PAD_MULTIPLE = 16
AMX_PAD_FROM = 32


class Session(Protocol):
    """A loaded graph: ``run`` maps (input_ids, attention_mask), int64 (batch, seq), to the
    float32 (batch, dim) sentence embeddings; ``metadata`` is the file's ``metadata_props``;
    ``run`` is fastest with windows of ``pad_from`` tokens or more padded to a multiple of
    ``pad_multiple``."""

    metadata: dict[str, str]
    threads: int
    pad_multiple: int
    pad_from: int

    def run(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray: ...


class OnnxRuntimeSession:
    def __init__(self, path: Path, threads: int) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.metadata: dict[str, str] = dict(self._session.get_modelmeta().custom_metadata_map)
        self.threads: int = self._session.get_session_options().intra_op_num_threads
        self.pad_multiple, self.pad_from = 1, 0

    def run(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        (vectors,) = self._session.run(["sentence_embedding"], {"input_ids": input_ids, "attention_mask": attention_mask})
        return vectors


class OpenVINOSession:
    def __init__(self, path: Path, precision: str, threads: int) -> None:
        import openvino

        core = openvino.Core()
        model = core.read_model(str(path))
        info = model.get_rt_info()  # the ONNX metadata_props are under "framework"
        framework = info["framework"] if "framework" in info else {}
        self.metadata = {key: value.astype(str) for key, value in framework.items()}
        config = {"INFERENCE_PRECISION_HINT": "bf16" if precision == "bf16" else "f32",
                  "PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads}
        self._compiled = core.compile_model(model, "CPU", config)
        self.threads = int(self._compiled.get_property("INFERENCE_NUM_THREADS"))
        amx = precision == "bf16" and has_amx()
        self.pad_multiple, self.pad_from = (AMX_PAD_MULTIPLE, AMX_PAD_FROM) if amx else (1, 0)
        self._requests = threading.local()  # an infer request serves one thread at a time

    def run(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        request = getattr(self._requests, "request", None)
        if request is None:
            request = self._requests.request = self._compiled.create_infer_request()
        request.infer({"input_ids": input_ids, "attention_mask": attention_mask})
        return np.array(request.get_output_tensor(0).data, dtype=np.float32)  # a copy: the request reuses its buffer


def open_session(path: Path, choice: Choice, threads: int | None) -> Session:
    """Load ``path`` on the backend and precision of ``choice``, on ``threads`` threads
    (``None``: ``cpu.physical_cores()``)."""
    threads = threads or physical_cores()
    if choice.backend == "openvino":
        return OpenVINOSession(path, choice.precision, threads)
    return OnnxRuntimeSession(path, threads)

"""Export a local sentence-transformers / Hugging Face BERT-family model to a chunktree ONNX file.

Needs the optional extra: ``pip install chunktree[export]`` (torch, transformers, onnxscript).
The exported graph takes ``input_ids`` and ``attention_mask`` and returns the mean-pooled,
L2-normalised ``sentence_embedding``; its metadata carries the tokenizer, window and a model id,
so ``Embedder(PATH)`` needs nothing else. The export is checked against the PyTorch model before
it is kept.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from chunktree.checks import InvalidValueError, require
from chunktree.models import onnx_file

log = logging.getLogger(__name__)

MIN_COSINE = 0.9999
# Texts the export is checked on: short and long (all within a 128-token window), punctuation,
# digits, non-ASCII, empty.
CHECK_TEXTS = [
    "Call me Ishmael.",
    "The quick brown fox jumps over the lazy dog.",
    "Whales are marine mammals; the sperm whale is the largest toothed predator.",
    "In 2024 the committee approved 3,500 new permits — roughly 12% more than in 2023.",
    "Zürich, São Paulo and Kraków hosted the meetings.",
    "A long text " + "about oceans, ships and the sea " * 15,
    "?",
    "",
]


@dataclass(frozen=True)
class ExportReport:
    model_id: str
    window: int
    dim: int
    texts: int
    min_cosine: float


def _import_torch() -> tuple[Any, Any]:
    torch = require("torch", "export", "chunktree export")
    transformers = require("transformers", "export", "chunktree export")
    return torch, transformers


def _window(model_dir: Path, tokenizer: object, config: object) -> int:
    st_config = model_dir / "sentence_bert_config.json"
    if st_config.is_file():
        return int(json.loads(st_config.read_text())["max_seq_length"])
    return int(min(getattr(tokenizer, "model_max_length", 512), config.max_position_embeddings))  # type: ignore[attr-defined]


def _weights_digest(model_dir: Path) -> str:
    files = sorted(p for p in model_dir.iterdir() if p.suffix in {".safetensors", ".bin"} and p.is_file())
    if not files:
        raise InvalidValueError(f"model_dir {model_dir} holds no .safetensors or .bin weights")
    h = hashlib.sha256()
    for p in files:
        h.update(p.read_bytes())
    return h.hexdigest()


def export_model(model_dir: str | os.PathLike[str], output: str | os.PathLike[str], *,
                 window: int | None = None, name: str | None = None) -> ExportReport:
    """Convert ``model_dir`` to ONNX at ``output`` and check it against PyTorch.

    ``name`` (default: the folder's name) starts the model id that keys the embedding cache.

    Raises InvalidValueError (a ValueError) when the exported model's min cosine to PyTorch is below ``MIN_COSINE``.
    """
    import onnx

    torch, transformers = _import_torch()
    model_dir, output = Path(model_dir), Path(output)
    if not (model_dir / "config.json").is_file():
        raise InvalidValueError(f"model_dir must be a Hugging Face model folder with config.json; got {model_dir}")
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    if not getattr(tokenizer, "is_fast", False):
        raise InvalidValueError(f"{model_dir}: needs a fast tokenizer (tokenizer.json or vocab.txt)")
    model = transformers.AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    window = window or _window(model_dir, tokenizer, model.config)
    if window > model.config.max_position_embeddings:
        raise InvalidValueError(f"window must be <= max_position_embeddings={model.config.max_position_embeddings}; got {window}")

    class MeanPooled(torch.nn.Module):  # type: ignore[name-defined]  # torch is imported at run time
        def __init__(self) -> None:
            super().__init__()
            self.encoder = model

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2.0, dim=1)

    wrapped = MeanPooled().eval()
    example = tokenizer(["an example", "another, longer example text"], padding=True, return_tensors="pt")
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "model.onnx"
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TorchScript exporter's notes on tracing
            torch.onnx.export(
                wrapped, (example["input_ids"], example["attention_mask"]), str(raw),
                input_names=["input_ids", "attention_mask"], output_names=["sentence_embedding"],
                dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                              "sentence_embedding": {0: "batch"}},
                opset_version=17, dynamo=False,
            )
        proto = onnx.load(str(raw))
    backend = tokenizer.backend_tokenizer
    backend.no_truncation()
    backend.no_padding()
    name = name or model_dir.resolve().name
    metadata = {
        onnx_file.META_MODEL_ID: f"{name}@sha256:{_weights_digest(model_dir)[:16]}",
        onnx_file.META_NAME: name,
        onnx_file.META_WINDOW: str(window),
        onnx_file.META_DIM: str(model.config.hidden_size),
        onnx_file.META_TOKENIZER: backend.to_str(),
    }
    del proto.metadata_props[:]
    for key, value in metadata.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(proto, str(output))

    min_cos = _check(output, tokenizer, wrapped, window, torch)
    if min_cos < MIN_COSINE:
        output.unlink()
        raise InvalidValueError(f"exported model disagrees with PyTorch: min cosine {min_cos:.6f} < {MIN_COSINE}")
    log.info("exported %s to %s: min cosine %.7f", model_dir, output, min_cos)
    return ExportReport(metadata[onnx_file.META_MODEL_ID], window, model.config.hidden_size, len(CHECK_TEXTS), min_cos)


def _check(path: Path, tokenizer: object, wrapped: object, window: int, torch: object) -> float:
    """Min cosine between the ONNX embedder and PyTorch on CHECK_TEXTS."""
    from chunktree.models.embedder import Embedder

    batch = tokenizer(CHECK_TEXTS, padding=True, truncation=True, max_length=window,  # type: ignore[operator]
                      return_tensors="pt")
    with torch.no_grad():  # type: ignore[attr-defined]
        reference = wrapped(batch["input_ids"], batch["attention_mask"]).numpy()  # type: ignore[operator]
    ours = Embedder(path).embed(CHECK_TEXTS)
    return float(np.min(np.sum(ours * reference, axis=1)))

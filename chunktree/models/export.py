"""Write a model folder's ONNX graph to a file of its own: ``chunktree export``.

The graph is the one ``Embedder`` builds for a folder or hub id (``registry.build_onnx``: from the
safetensors weights, without torch), with the folder's pooling, prompts, window, tokenizer and a
model id in its metadata, so ``Embedder(PATH)`` needs nothing else: a file to copy to a machine
that has no hub access, or to pin a model's exact graph.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from chunktree.checks import InvalidValueError
from chunktree.models import onnx_file


@dataclass(frozen=True)
class ExportReport:
    model_id: str
    window: int
    dim: int
    pooling: str


def export_model(model_dir: str | os.PathLike[str], output: str | os.PathLike[str], *,
                 window: int | None = None, name: str | None = None) -> ExportReport:
    """Write the ONNX graph of the model folder ``model_dir`` to ``output``.

    ``window`` (tokens per forward pass, default the folder's ``max_seq_length``) may only shorten
    the folder's own; ``name`` (default: the folder's name) starts the model id that keys the
    embedding cache.
    """
    from chunktree.models.registry import build_onnx
    from chunktree.models.source import read_folder

    folder = read_folder(model_dir, name)
    if window is not None:
        if not 8 <= window <= folder.window:
            raise InvalidValueError(f"window must be from 8 to {folder.window} (the model's own); got {window}")
        folder = dataclasses.replace(folder, window=window)
    meta = build_onnx(folder, Path(output))  # written whole or not at all
    return ExportReport(meta[onnx_file.META_MODEL_ID], folder.window, int(folder.config["hidden_size"]),
                        folder.pooling)

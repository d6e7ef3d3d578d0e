"""The self-describing ONNX file every embedder reads: the metadata keys that name the model, its
window, dimension and tokenizer, and the atomic writer that every builder (the fp32 graph, its
int8 quantisation, ``chunktree export``) uses."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

# Keys of the ONNX metadata_props that make a model file self-describing.
META_MODEL_ID = "chunktree.model_id"
META_NAME = "chunktree.name"
META_WINDOW = "chunktree.window"
META_DIM = "chunktree.dim"
META_TOKENIZER = "chunktree.tokenizer"

# Set by the int8 build: run each window alone, so a text's activation scales come from it only.
META_WINDOWS_ALONE = "chunktree.windows_alone"


def write_model(model: Any, target: Path) -> None:
    """Write an ``onnx.ModelProto`` to ``target`` beside it and rename: concurrent builders never
    see a partial file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".onnx.tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(model.SerializeToString())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

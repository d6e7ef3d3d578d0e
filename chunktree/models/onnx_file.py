"""The self-describing ONNX file every embedder reads: the metadata keys that name the model, its
window, dimension and tokenizer, and the atomic writer that every builder (the fp32 graph, its
int8 quantisation, ``chunktree export``) uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chunktree.checks import InvalidValueError
from chunktree.files import replacing
from chunktree.paths import CACHE_ENV

# Keys of the ONNX metadata_props that make a model file self-describing.
META_MODEL_ID = "chunktree.model_id"
META_NAME = "chunktree.name"
META_WINDOW = "chunktree.window"
META_DIM = "chunktree.dim"
META_TOKENIZER = "chunktree.tokenizer"
META_POOLING = "chunktree.pooling"  # cls, mean or lasttoken (informative: the graph pools)
META_PROMPTS = "chunktree.prompts"  # JSON: prompt name -> the text put before such a text
META_MATRYOSHKA = "chunktree.matryoshka"  # "1": the leading dimensions are an embedding of their own

# Set by the int8 build: run each window alone, so a text's activation scales come from it only.
META_WINDOWS_ALONE = "chunktree.windows_alone"


def write_model(model: Any, target: Path) -> None:
    """Write an ``onnx.ModelProto`` to ``target`` whole or not at all (``files.replacing``):
    concurrent builders never see a partial file. A full disk is an error naming the file."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with replacing(target, "wb") as f:
            f.write(model.SerializeToString())
    except OSError as exc:
        raise InvalidValueError(f"the model file {target} cannot be written ({exc.strerror or exc}); free some space "
                                f"there, or point {CACHE_ENV} at another folder") from None

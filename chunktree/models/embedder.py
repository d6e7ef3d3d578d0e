"""Text embeddings with onnxruntime: tokenise, split into model windows, batch by length, pool.

A model file is self-describing: its ONNX ``metadata_props`` hold the tokenizer, the window, the
dimension and a model id (see ``registry``). Both the graphs chunktree builds from bundled weights
and the files written by ``chunktree export`` carry them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from chunktree.checks import InvalidTypeError, InvalidValueError, positive_int
from chunktree.models import onnx_file, registry
from chunktree.progress import tracked

log = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 16


def resolve_model(model: str | os.PathLike[str]) -> Path:
    """Map a known model name to its (built) ONNX file, or check that a path is an ONNX file."""
    if isinstance(model, str) and model in registry.MODELS:
        return registry.onnx_path(registry.MODELS[model])
    path = Path(model)
    if not path.is_file():
        raise InvalidValueError(
            f"model must be one of {sorted(registry.MODELS)} or the path of an .onnx file written by "
            f"'chunktree export'; got {str(model)!r}"
        )
    return path


class Embedder:
    """Embeds texts into L2-normalised float32 vectors.

    Texts longer than the model's window are split into windows (special tokens included in each);
    their embedding is the normalised, token-count-weighted mean of the window embeddings, so no
    text is silently truncated.

    Parameters
    ----------
    model
        a known model name (default ``"all-MiniLM-L6-v2"``; ``"all-MiniLM-L6-v2-int8"`` is its
        int8 variant, ``models.quantize``) or an ONNX file from ``chunktree export``.
    threads
        onnxruntime intra-op threads; ``None`` lets onnxruntime use every physical core.
    batch_size
        windows per forward pass; windows are sorted by token count before batching
        (an int8 model runs each window alone, whatever the batch size).
    """

    def __init__(
        self,
        model: str | os.PathLike[str] = registry.DEFAULT_MODEL.name,
        *,
        threads: int | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        if threads is not None:
            positive_int(threads, "threads")
        self.batch_size = positive_int(batch_size, "batch_size")
        self.path = resolve_model(model)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = threads or 0
        options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        meta = self._session.get_modelmeta().custom_metadata_map
        required = [onnx_file.META_MODEL_ID, onnx_file.META_WINDOW, onnx_file.META_DIM, onnx_file.META_TOKENIZER]
        missing = [k for k in required if k not in meta]
        if missing:
            raise InvalidValueError(
                f"model file {self.path} lacks the metadata {missing}; write it with 'chunktree export'"
            )
        self.model_id: str = meta[onnx_file.META_MODEL_ID]
        self.name: str = meta.get(onnx_file.META_NAME, self.path.stem)
        self.window: int = int(meta[onnx_file.META_WINDOW])
        self.dim: int = int(meta[onnx_file.META_DIM])
        # For counting tokens (the chunker): whole texts, no padding, no truncation.
        self.tokenizer = Tokenizer.from_str(meta[onnx_file.META_TOKENIZER])
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        # For the model: windows of at most `window` tokens, special tokens included in each.
        self._window_tokenizer = Tokenizer.from_str(meta[onnx_file.META_TOKENIZER])
        self._window_tokenizer.no_padding()
        self._window_tokenizer.enable_truncation(self.window, stride=0)
        self.special_tokens: int = self.tokenizer.post_processor.num_special_tokens_to_add(False)
        # int8 models compute activation scales over the whole input: each window runs alone, so a
        # text's vector does not depend on the batch around it (``quantize``).
        self.windows_alone: bool = meta.get(onnx_file.META_WINDOWS_ALONE) == "1"
        pad = self.tokenizer.padding
        self._pad_id = 0 if pad is None else int(pad["pad_id"])

    def __repr__(self) -> str:
        return f"Embedder(model_id={self.model_id!r}, dim={self.dim}, window={self.window})"

    def embed(self, texts: Sequence[str], *, batch_size: int | None = None, progress: bool = False) -> np.ndarray:
        """Embed ``texts``.

        Returns
        -------
        numpy.ndarray, float32, shape (len(texts), dim), C-contiguous; each row has unit L2 norm.
        """
        if isinstance(texts, str):
            raise InvalidTypeError("texts must be a sequence of strings, not a single string; wrap it in a list")
        texts = list(texts)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise InvalidTypeError(f"texts[{i}] must be str; got {type(t).__name__}")
        batch_size = self.batch_size if batch_size is None else positive_int(batch_size, "batch_size")
        if self.windows_alone:
            batch_size = 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out

        windows: list[list[int]] = []
        owner: list[int] = []
        for i, enc in enumerate(self._window_tokenizer.encode_batch(texts)):
            for w in [enc, *enc.overflowing]:
                windows.append(w.ids)
                owner.append(i)
        lengths = np.fromiter((len(w) for w in windows), dtype=np.int64, count=len(windows))
        # Sort by token count so each batch pads little; stable, so equal lengths keep input order.
        by_length = np.argsort(lengths, kind="stable")
        vectors = np.empty((len(windows), self.dim), dtype=np.float32)
        batches = range(0, len(windows), batch_size)
        for start in tracked(batches, len(batches), "embed", "batch", enabled=progress):
            idx = by_length[start:start + batch_size]
            vectors[idx] = self._run([windows[j] for j in idx], int(lengths[idx].max()))

        owner_arr = np.asarray(owner, dtype=np.int64)
        weights = np.maximum(lengths - self.special_tokens, 1).astype(np.float32)
        np.add.at(out, owner_arr, vectors * weights[:, None])
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        out /= np.maximum(norms, 1e-12)
        return out

    def _run(self, ids: list[list[int]], width: int) -> np.ndarray:
        input_ids = np.full((len(ids), width), self._pad_id, dtype=np.int64)
        mask = np.zeros((len(ids), width), dtype=np.int64)
        for row, seq in enumerate(ids):
            input_ids[row, :len(seq)] = seq
            mask[row, :len(seq)] = 1
        (vectors,) = self._session.run(["sentence_embedding"], {"input_ids": input_ids, "attention_mask": mask})
        return vectors

    def count_tokens(self, texts: Sequence[str]) -> np.ndarray:
        """Tokens of each text: chunktree's one token-count convention.

        A text's tokens are the tokenizer's ids for its content, **without** the special tokens
        ([CLS], [SEP]) the model adds around each window: what the text adds to an LLM prompt or a
        token budget. (``chunk_tokens`` in chunking is a window size instead, so it counts the
        special tokens too: a chunk holds at most ``chunk_tokens - special_tokens`` of these.)

        Returns
        -------
        numpy.ndarray, int64, shape (len(texts),).
        """
        if isinstance(texts, str):
            raise InvalidTypeError("texts must be a sequence of strings, not a single string; wrap it in a list")
        encodings = self.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))

    def warmup(self) -> None:
        """Run one small batch so the first real request does not pay session initialisation."""
        self.embed(["warm up the embedder"])


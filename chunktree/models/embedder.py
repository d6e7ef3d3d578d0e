"""Text embeddings: tokenise, split into model windows, batch by token budget, run, pool.

A model file is self-describing: its ONNX ``metadata_props`` hold the tokenizer, the window, the
dimension and a model id (see ``registry``). Both the graphs chunktree builds from bundled weights
and the files written by ``chunktree export`` carry them. ``backends`` runs the file on
onnxruntime or OpenVINO, in fp32, bf16 or int8.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from chunktree.checks import ChunktreeError, InvalidTypeError, InvalidValueError, normalised, positive_int, unicode
from chunktree.models import backends, onnx_file, quantize, registry, source
from chunktree.paths import cache_dir
from chunktree.progress import Progress, tracked

log = logging.getLogger(__name__)

# Windows per forward pass at most, and tokens (rows x padded width) per pass at most, per backend:
# short texts go many to a pass, long ones fewer. Chosen by bench/bench_batching.py.
DEFAULT_BATCH_SIZE = 256
DEFAULT_BATCH_TOKENS = {"openvino": 2048, "onnxruntime": 1024}


def resolve_model(model: str | os.PathLike[str]) -> Path:
    """The ONNX file of ``model``: a known model's name (its bundled weights), an ``.onnx`` file, a
    model folder (``source.read_folder``) or a Hugging Face hub id (``org/name``, from the hub's
    cache, downloaded into it only when missing); a folder or hub model is built on first use."""
    if isinstance(model, str) and model in registry.MODELS:
        return registry.onnx_path(registry.MODELS[model])
    path = Path(model)
    if path.is_file():
        return path
    if path.is_dir():
        return registry.built(source.read_folder(path))
    if isinstance(model, str) and source.HUB_ID.fullmatch(model):
        return registry.built(source.read_folder(source.hub_folder(model), model))
    raise source.ModelNotFoundError(
        f"model must be one of {sorted(registry.MODELS)}, an .onnx file, a model folder (config.json, "
        f"model.safetensors, tokenizer.json) or a Hugging Face hub id such as BAAI/bge-small-en-v1.5; got {str(model)!r}",
        param="model")


def token_batches(lengths: np.ndarray, batch_size: int, batch_tokens: int) -> list[np.ndarray]:
    """Group window indices into forward passes: sorted by token count (stable, so equal lengths
    keep input order), each pass at most ``batch_size`` windows and at most ``batch_tokens``
    tokens once padded to its longest window (a window longer than the budget runs alone)."""
    by_length = np.argsort(lengths, kind="stable")
    batches, start = [], 0
    while start < by_length.size:
        end = start + 1
        while (end < by_length.size and end - start < batch_size
               and (end - start + 1) * lengths[by_length[end]] <= batch_tokens):
            end += 1
        batches.append(by_length[start:end])
        start = end
    return batches


class Embedder:
    """Embeds texts into L2-normalised float32 vectors.

    Texts longer than the model's window are split into windows (special tokens included in each);
    their embedding is the normalised, token-count-weighted mean of the window embeddings, so no
    text is silently truncated.

    Parameters
    ----------
    model
        a known model name (default ``"all-MiniLM-L6-v2"``, bundled), a Hugging Face hub id
        (``"BAAI/bge-small-en-v1.5"``: taken from the hub's cache, downloaded into it first when it
        is not there), a local model folder (``config.json``, ``model.safetensors``,
        ``tokenizer.json`` and its sentence-transformers configuration: pooling, window, prompts),
        or an ONNX file from ``chunktree export``. A folder or hub model's ONNX graph is built from
        its weights, without torch, once per machine (``encoder_onnx``); BERT, RoBERTa,
        XLM-RoBERTa and MPNet encoders with CLS, mean or last-token pooling.
    backend
        ``"auto"`` (default), ``"onnxruntime"`` or ``"openvino"``.
    precision
        ``"auto"`` (default), ``"fp32"``, ``"bf16"`` (OpenVINO, on a CPU with bf16 units) or
        ``"int8"`` (the model's quantised graph on onnxruntime, ``models.quantize``). ``auto`` on
        ``auto``: OpenVINO bf16 where the CPU has bf16 units, else OpenVINO fp32, else (OpenVINO
        cannot load) onnxruntime fp32; ``choice`` says which and why.
    threads
        the runtime's threads; ``None`` lets it use every physical core.
    batch_size
        windows per forward pass at most.
    batch_tokens
        tokens per forward pass at most, counting each window padded to the longest of its pass:
        windows are sorted by token count and packed up to this budget, so short texts are not
        padded to long ones (an int8 model runs each window alone, whatever the budget). Default
        ``DEFAULT_BATCH_TOKENS`` of the backend: 2048 on OpenVINO, 1024 on onnxruntime.

    Attributes
    ----------
    model_id
        the model's id (name and weights digest).
    pooling
        ``"cls"``, ``"mean"`` or ``"lasttoken"``.
    prompts
        the model's prompts by name (``{"query": "query: ", ...}``); ``prompt(name)`` picks one.
    matryoshka
        the model card declares Matryoshka training: the first ``d`` dimensions of a vector,
        normalised again, are a shorter embedding (the service's ``dimensions``).
    backend, precision
        what it runs on (``choice``).
    vectors_id
        the id of the vectors it makes: model, backend and precision. The embedding cache keys
        by it, so vectors of one precision are never served for another.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] = registry.DEFAULT_MODEL.name,
        *,
        backend: str = "auto",
        precision: str = "auto",
        threads: int | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        batch_tokens: int | None = None,
    ) -> None:
        from tokenizers import Tokenizer

        if threads is not None:
            positive_int(threads, "threads")
        self.batch_size = positive_int(batch_size, "batch_size")
        if batch_tokens is not None:
            positive_int(batch_tokens, "batch_tokens")
        self.choice: backends.Choice = backends.choose(backend, precision)
        self.path = resolve_model(model)
        if self.choice.precision == "int8":
            self.path = quantize.int8_path(self.path)
        self._session = self._open(model, threads)
        meta = self._session.metadata
        if meta.get(onnx_file.META_WINDOWS_ALONE) == "1" and self.choice.precision != "int8":
            if precision != "auto" or backend == "openvino":
                raise InvalidValueError(f"model file {self.path} is an int8 graph: it runs with precision 'int8' "
                                        f"on onnxruntime, not {self.choice.backend} {self.choice.precision}")
            self.choice = backends.Choice("onnxruntime", "int8", "auto: the model file is an int8 graph")
            self._session = backends.open_session(self.path, self.choice, threads)
            meta = self._session.metadata
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
        self.backend: str = self.choice.backend
        self.batch_tokens: int = batch_tokens or DEFAULT_BATCH_TOKENS[self.backend]
        self.precision: str = self.choice.precision
        self.threads: int = self._session.threads
        self.vectors_id: str = f"{self.model_id}+{self.backend}-{self.precision}"
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
        named = [i for i in (self.tokenizer.token_to_id(t) for t in ("[PAD]", "<pad>")) if i is not None]
        self._pad_id = int(pad["pad_id"]) if pad is not None else named[0] if named else 0
        # The special tokens the model puts before and after a window's content (for token-id input).
        marked, bare = self.tokenizer.encode("a").ids, self.tokenizer.encode("a", add_special_tokens=False).ids
        at = next(j for j in range(len(marked)) if marked[j:j + len(bare)] == bare)
        self._around = (marked[:at], marked[at + len(bare):])
        self.pooling: str = meta.get(onnx_file.META_POOLING, "mean")
        self.prompts: dict[str, str] = json.loads(meta.get(onnx_file.META_PROMPTS, "{}"))
        self.matryoshka: bool = meta.get(onnx_file.META_MATRYOSHKA) == "1"

    def _open(self, model: str | os.PathLike[str], threads: int | None) -> backends.Session:
        """The runtime's session of ``self.path``. A converted model in chunktree's cache that the
        runtime cannot load (a file damaged on disk) is moved aside, with a warning, and built
        again; any other model file that cannot be loaded is named in the error."""
        try:
            return backends.open_session(self.path, self.choice, threads)
        except ChunktreeError:
            raise
        except Exception as exc:  # each runtime raises its own kinds for a file it cannot parse
            detail = " ".join(str(exc).split())[:300]
            if not self.path.resolve().is_relative_to((cache_dir() / "models").resolve()):
                raise InvalidValueError(f"model file {self.path} cannot be loaded by {self.choice.backend} "
                                        f"({detail}): it is damaged or not a model file; export it again") from None
        aside = self.path.with_name(f"{self.path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
        os.replace(self.path, aside)
        log.warning("the converted model %s cannot be loaded (%s); moved it to %s and building it again",
                    self.path, detail, aside)
        self.path = resolve_model(model)
        if self.choice.precision == "int8":
            self.path = quantize.int8_path(self.path)
        return backends.open_session(self.path, self.choice, threads)

    def prompt(self, name: str) -> str:
        """The text the model puts before a ``"query"`` or a ``"document"`` (sentence-transformers'
        prompts; a document also takes a ``"passage"`` prompt), or ``""`` when it has none."""
        if name == "document":
            return self.prompts.get("document", self.prompts.get("passage", ""))
        return self.prompts.get(name, "")

    def __repr__(self) -> str:
        return (f"Embedder(model_id={self.model_id!r}, backend={self.backend!r}, precision={self.precision!r}, "
                f"dim={self.dim}, window={self.window})")

    def embed(self, texts: Sequence[str], *, batch_size: int | None = None, batch_tokens: int | None = None,
              progress: Progress = False) -> np.ndarray:
        """Embed ``texts`` (``batch_size`` and ``batch_tokens`` override the embedder's for this call).

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
            unicode(t, f"texts[{i}]")
        windows: list[list[int]] = []
        owner: list[int] = []
        for i, enc in enumerate(self._window_tokenizer.encode_batch(texts)):
            for w in [enc, *enc.overflowing]:
                windows.append(w.ids)
                owner.append(i)
        return self._embed_windows(windows, owner, len(texts), batch_size, batch_tokens, progress)

    def embed_token_ids(self, ids: Sequence[Sequence[int]], *, batch_size: int | None = None,
                        batch_tokens: int | None = None) -> np.ndarray:
        """Embed texts given as the model's own token ids (without special tokens), as ``embed``
        embeds the texts they tokenise to: windows of the content ids, the model's special tokens
        around each. Ids outside the vocabulary raise ``InvalidValueError`` naming the first."""
        vocab = self.tokenizer.get_vocab_size(with_added_tokens=True)
        windows: list[list[int]] = []
        owner: list[int] = []
        room = self.window - len(self._around[0]) - len(self._around[1])
        for i, seq in enumerate(ids):
            seq = list(seq)
            bad = next((j for j, t in enumerate(seq) if isinstance(t, bool) or not isinstance(t, (int, np.integer))
                        or not 0 <= t < vocab), None)
            if bad is not None:
                raise InvalidValueError(f"ids[{i}][{bad}] must be a token id of this model, an int in [0, {vocab}); "
                                        f"got {seq[bad]!r:.40}")
            for start in range(0, max(len(seq), 1), room):
                windows.append(self._around[0] + [int(t) for t in seq[start:start + room]] + self._around[1])
                owner.append(i)
        return self._embed_windows(windows, owner, len(ids), batch_size, batch_tokens, False)

    def _embed_windows(self, windows: list[list[int]], owner: list[int], n: int, batch_size: int | None,
                       batch_tokens: int | None, progress: Progress) -> np.ndarray:
        """The vectors of ``n`` texts from their windows (``owner[j]``: the text of window ``j``):
        the token-weighted, normalised mean of each text's windows."""
        batch_size = self.batch_size if batch_size is None else positive_int(batch_size, "batch_size")
        batch_tokens = self.batch_tokens if batch_tokens is None else positive_int(batch_tokens, "batch_tokens")
        if self.windows_alone:
            batch_size = 1
        out = np.zeros((n, self.dim), dtype=np.float32)
        if not n:
            return out
        lengths = np.fromiter((len(w) for w in windows), dtype=np.int64, count=len(windows))
        widths = self.pass_widths(lengths)
        vectors = np.empty((len(windows), self.dim), dtype=np.float32)
        batches = token_batches(widths, batch_size, batch_tokens)
        for idx in tracked(batches, len(batches), "embed", "batch", enabled=progress):
            vectors[idx] = self._run([windows[j] for j in idx], int(widths[idx].max()))

        owner_arr = np.asarray(owner, dtype=np.int64)
        weights = np.maximum(lengths - self.special_tokens, 1).astype(np.float32)
        np.add.at(out, owner_arr, vectors * weights[:, None])
        return normalised(out)

    def pass_widths(self, lengths: np.ndarray) -> np.ndarray:
        """Each window's width in a forward pass: its token count, padded up to a multiple of the
        session's ``pad_multiple`` (at most the window) from ``pad_from`` tokens on. The padding is
        masked out: it changes the speed, not the vectors."""
        m = self._session.pad_multiple
        return np.where(lengths >= self._session.pad_from, np.minimum(-(-lengths // m) * m, self.window), lengths)

    def _run(self, ids: list[list[int]], width: int) -> np.ndarray:
        input_ids = np.full((len(ids), width), self._pad_id, dtype=np.int64)
        mask = np.zeros((len(ids), width), dtype=np.int64)
        for row, seq in enumerate(ids):
            input_ids[row, :len(seq)] = seq
            mask[row, :len(seq)] = 1
        return self._session.run(input_ids, mask)

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


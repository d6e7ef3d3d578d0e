"""Read files into documents: plain text plus where its pages and headings start.

Supported inputs: ``.txt``, ``.md``/``.markdown``, ``.pdf`` (pypdf), ``.html``/``.htm`` (the
page's main content, as Markdown, by trafilatura) and ``.jsonl`` (one document per line:
``text``, optional ``id``, any other keys kept as metadata), given as files or folders (searched
recursively, in sorted order). Every problem — an empty, binary, undecodable or unreadable file, a
bad JSONL line — raises ``DocumentError`` naming the file.
"""

from __future__ import annotations

import codecs
import gzip
import json
import logging
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from chunktree.checks import InvalidValueError, MissingExtraError, json_loads

log = logging.getLogger(__name__)

TEXT_SUFFIXES = {".txt": "text", ".md": "markdown", ".markdown": "markdown", ".pdf": "pdf",
                 ".html": "html", ".htm": "html", ".jsonl": "jsonl"}
SAMPLE_SOURCE = "sample:moby-dick"


class DocumentError(InvalidValueError):
    """An input file cannot be read as a document."""


@dataclass(frozen=True)
class Document:
    """The text of one source, with the offsets needed for provenance.

    Attributes
    ----------
    source
        path or URI of the source; ``path#id`` for one line of a JSONL file.
    text
        the document text that chunk offsets index into.
    kind
        ``"text"`` or ``"markdown"`` (decides the splitter).
    page_starts
        for PDFs, the character offset where each page starts (page 1 first).
    headings
        (offset, heading) pairs in text order.
    meta
        extra fields of a JSONL record.
    """

    source: str
    text: str
    kind: str = "text"
    page_starts: tuple[int, ...] = ()
    headings: tuple[tuple[int, str], ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)


def read_paths(paths: Iterable[str | Path]) -> list[Document]:
    """Read every supported file under ``paths`` into documents."""
    docs: list[Document] = []
    for path in _expand(paths):
        docs.extend(read_file(path))
    return docs


def _expand(paths: Iterable[str | Path]) -> Iterator[Path]:
    any_path = False
    for raw in paths:
        any_path = True
        path = Path(raw)
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file())
            supported = [p for p in files if p.suffix.lower() in TEXT_SUFFIXES]
            skipped = len(files) - len(supported)
            if skipped:
                log.warning("%s: skipped %d file(s) whose type is not one of %s", path, skipped,
                            sorted(TEXT_SUFFIXES))
            if not supported:
                raise DocumentError(f"{path}: folder holds no supported file ({sorted(TEXT_SUFFIXES)})")
            yield from supported
        elif path.is_file():
            yield path
        else:
            raise DocumentError(f"{path}: no such file or folder")
    if not any_path:
        raise DocumentError("no input paths given")


def read_file(path: str | Path) -> list[Document]:
    """Read one file; a JSONL file gives one document per line."""
    path = Path(path)
    kind = TEXT_SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise DocumentError(f"{path}: unsupported file type {path.suffix!r}; supported: {sorted(TEXT_SUFFIXES)}")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DocumentError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    if not data.strip():
        raise DocumentError(f"{path}: file is empty")
    if kind == "pdf":
        return [_read_pdf(path, data)]
    text = _decode(path, data)
    if kind == "jsonl":
        return _read_jsonl(str(path), text.splitlines())
    if kind == "html":
        return [_read_html(path, text)]
    return [_text_document(str(path), text, kind)]


# Byte-order marks of the encodings read besides UTF-8; UTF-32 first (its LE mark starts like UTF-16's).
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def _decode(path: Path, data: bytes) -> str:
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                return data.decode(encoding)  # the codec reads and drops the mark
            except UnicodeDecodeError as exc:
                raise DocumentError(f"{path}: starts with a {encoding.upper()} byte-order mark but is not valid "
                                    f"{encoding.upper()} (offset {exc.start}); convert it to UTF-8 first") from None
    if b"\x00" in data:
        raise DocumentError(f"{path}: looks binary (contains NUL bytes); expected UTF-8 text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DocumentError(
            f"{path}: not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "convert it to UTF-8 first"
        ) from None


def _text_document(source: str, text: str, kind: str, meta: dict[str, Any] | None = None,
                   headings: tuple[tuple[int, str], ...] = ()) -> Document:
    if not text.strip():
        raise DocumentError(f"{source}: holds no text")
    if kind == "markdown":
        headings = _markdown_headings(text)
    return Document(source, text, kind, headings=headings, meta=meta or {})


_ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)[ \t#]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")


def _markdown_headings(text: str) -> tuple[tuple[int, str], ...]:
    """ATX headings (``# Title``) outside fenced code blocks, with their character offsets."""
    headings = []
    offset = 0
    in_fence = False
    for line in text.splitlines(keepends=True):
        if _FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence:
            m = _ATX_HEADING.match(line.rstrip("\r\n"))
            if m:
                headings.append((offset, m.group(2).strip()))
        offset += len(line)
    return tuple(headings)


def _read_jsonl(source: str, lines: list[str]) -> list[Document]:
    docs = []
    seen: set[str] = set()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{source}:{lineno}"
        try:
            record = json_loads(line)
        except ValueError as exc:  # json.JSONDecodeError names the column; nesting too deep does not
            detail = f"{exc.msg} at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else str(exc)
            raise DocumentError(f"{where}: invalid JSON ({detail})") from None
        if not isinstance(record, dict):
            raise DocumentError(f"{where}: each line must be a JSON object; got {type(record).__name__}")
        text = record.pop("text", None)
        if not isinstance(text, str):
            raise DocumentError(f"{where}: field 'text' must be a string; got {type(text).__name__}")
        # A generated id says where it came from, so it cannot be taken for an explicit "id": 3.
        doc_id = str(record.pop("id", f"line-{lineno}"))
        if doc_id in seen:
            raise DocumentError(f"{where}: duplicate id {doc_id!r}")
        seen.add(doc_id)
        title = record.get("title")
        # A record's title heads the whole record.
        headings = ((0, title.strip()),) if isinstance(title, str) and title.strip() else ()
        docs.append(_text_document(f"{source}#{doc_id}", text, "text", meta=record, headings=headings))
    if not docs:
        raise DocumentError(f"{source}: holds no JSON lines")
    return docs


def _read_pdf(path: Path, data: bytes) -> Document:
    import io

    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages]
    except (PyPdfError, ValueError, KeyError, TypeError) as exc:
        raise DocumentError(f"{path}: not a readable PDF ({exc})") from None
    parts, starts, offset = [], [], 0
    for page_text in pages:
        starts.append(offset)
        parts.append(page_text)
        offset += len(page_text) + 2
    text = "\n\n".join(parts)
    if not text.strip():
        raise DocumentError(f"{path}: PDF has no extractable text (scanned images need OCR first)")
    return Document(str(path), text, "text", page_starts=tuple(starts))


def _read_html(path: Path, html: str) -> Document:
    """The page's main content as Markdown (trafilatura, leaning to recall): navigation, headers and
    footers left out, block elements on lines of their own, headings as ``#`` lines, emphasis as
    ``**``."""
    try:
        import trafilatura
    except ImportError as exc:  # e.g. an lxml without lxml_html_clean, which justext imports
        raise MissingExtraError(f"{path}: reading HTML needs trafilatura and lxml_html_clean, and importing them "
                                f"failed ({' '.join(str(exc).split())}): pip install trafilatura lxml_html_clean"
                                ) from exc

    text = trafilatura.extract(html, output_format="markdown", include_formatting=True, include_tables=True,
                               include_links=False, include_images=False, include_comments=False,
                               favor_recall=True)
    if text is None or not text.strip():
        raise DocumentError(f"{path}: HTML page has no visible text")
    return _text_document(str(path), text, "markdown")


def sample_documents() -> list[Document]:
    """The built-in sample corpus: Moby-Dick by Herman Melville, one document per chapter
    (public domain; the dataset's licence, PDDL/CC0, ships beside it as MOBY_DICK_LICENSE)."""
    ref = resources.files("chunktree") / "data" / "moby_dick.jsonl.gz"
    with ref.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as f:
        return _read_jsonl(SAMPLE_SOURCE, f.read().splitlines())

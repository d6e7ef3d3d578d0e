"""Read files into documents: plain text plus where its pages and headings start.

What is read, by name and by content:

- ``.md``/``.markdown`` (Markdown headings), ``.rst``/``.rst.txt`` (reStructuredText headings),
  ``.pdf`` (pypdf), ``.html``/``.htm`` (the page's main content, as Markdown, by trafilatura),
  ``.jsonl`` (one document per line: ``text``, optional ``id``, any other keys kept as metadata);
- man pages (roff: a ``.TH`` or ``.Dd`` request at the top), as text with their section headings;
- any other file whose content is UTF-8 text (or UTF-16/32 with a byte-order mark), whatever its
  name: ``.txt``, ``README``, ``NEWS``, ``copyright``, source code;
- any of these compressed with gzip, bzip2 or xz (``NEWS.gz``, ``ls.1.gz``, ``notes.md.xz``): the
  name without the compression suffix decides as above.

Files and folders are given as paths; folders are searched recursively in sorted order, hidden
files and folders (``.git``) left out, with ``include``/``exclude`` globs to choose, and each file
is read once however often it is reached.
In a folder, a file that is not text (binary, not UTF-8, empty) is skipped and named with the
reason in one warning; named on its own, it is an error. Every other problem, such as a bad JSONL
line or an unreadable PDF, raises ``DocumentError`` naming the file.
"""

from __future__ import annotations

import bz2
import codecs
import fnmatch
import gzip
import json
import logging
import lzma
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import IO, Any

from chunktree.checks import InvalidValueError, MissingExtraError, json_loads
from chunktree.engine import roff

log = logging.getLogger(__name__)

NAMED_TYPES = {".md": "markdown", ".markdown": "markdown", ".rst": "rst", ".pdf": "pdf", ".html": "html",
               ".htm": "html", ".jsonl": "jsonl"}
# Compression by suffix, and by the magic bytes at the start of the file.
COMPRESSIONS: dict[str, tuple[re.Pattern[bytes], Callable[[IO[bytes]], Any]]] = {
    ".gz": (re.compile(b"\x1f\x8b\x08"), lambda f: gzip.GzipFile(fileobj=f)),
    ".bz2": (re.compile(b"BZh[1-9]1AY&SY"), lambda f: bz2.BZ2File(f)),
    ".xz": (re.compile(b"\xfd7zXZ\x00"), lambda f: lzma.LZMAFile(f)),
}
MAX_DECOMPRESSED = 1 << 30  # bytes; a larger member is refused (a decompression bomb or not a document)
NAMED_SKIPS = 50  # files skipped in a folder that the warning names; the rest are logged at INFO
SAMPLE_SOURCE = "sample:moby-dick"
READS = ("UTF-8 text (any name: .txt, README, source code), .md, .rst, .html, .pdf, .jsonl, man pages; "
         "each also .gz/.bz2/.xz")


class DocumentError(InvalidValueError):
    """An input file cannot be read as a document."""


class NotText(DocumentError):
    """The file is not a document chunktree reads (binary, not UTF-8, empty): a folder skips it."""


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


def read_paths(paths: Iterable[str | Path], include: Iterable[str] = (), exclude: Iterable[str] = ()) -> list[Document]:
    """Read every document under ``paths``.

    Parameters
    ----------
    paths
        files and folders; a folder is searched recursively, in sorted order, leaving out hidden
        files and folders (names starting with ``.``).
    include, exclude
        glob patterns (``fnmatch``: ``*`` also crosses ``/``) for the files found in folders, matched
        against the file's name and its path inside the folder given: with ``include``, only files that
        match one; then files that match an ``exclude`` pattern are left out. Files named directly are
        always read.
    """
    include, exclude = list(include), list(exclude)
    docs: list[Document] = []
    skipped: list[str] = []
    for path, in_folder in _expand(paths, include, exclude):
        try:
            docs.extend(read_file(path))
        except NotText as exc:
            if not in_folder:
                raise
            skipped.append(str(exc))
    if skipped:
        named = "; ".join(skipped[:NAMED_SKIPS])
        more = f"; and {len(skipped) - NAMED_SKIPS} more (-v names them)" if len(skipped) > NAMED_SKIPS else ""
        log.warning("skipped %d file(s) that are not text documents: %s%s", len(skipped), named, more)
        for reason in skipped[NAMED_SKIPS:]:
            log.info("skipped %s", reason)
    if not docs:
        found = f"{len(skipped)} file(s) skipped, named above" if skipped else "no files found"
        raise DocumentError(f"no documents in {', '.join(map(str, paths))}: {found}; chunktree reads {READS}")
    return docs


def _expand(paths: Iterable[str | Path], include: list[str], exclude: list[str]) -> Iterator[tuple[Path, bool]]:
    """Each file to read once, and whether it was found in a folder (not named directly)."""
    seen: set[tuple[int, int]] = set()
    any_path = False
    for raw in paths:
        any_path = True
        path = Path(raw)
        if path.is_dir():
            for file in _walk(path):
                rel = file.relative_to(path).as_posix()
                if (include and not _matches(rel, include)) or _matches(rel, exclude):
                    continue
                if _first_time(file, seen):
                    yield file, True
        elif path.exists():
            if _first_time(path, seen):
                yield path, False
        else:
            raise DocumentError(f"{path}: no such file or folder")
    if not any_path:
        raise DocumentError("no input paths given")


def _matches(rel: str, globs: list[str]) -> bool:
    """Whether a file's path inside its folder, or its name, matches one of ``globs``."""
    name = rel.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatch(rel, g) or fnmatch.fnmatch(name, g) for g in globs)


def _walk(folder: Path) -> Iterator[Path]:
    """The files under ``folder`` in sorted order, leaving out hidden ones (``.git``, ``.cache``...),
    following links to folders but never into a folder already on the way down (a link loop)."""
    def visit(d: Path, ancestors: frozenset[tuple[int, int]]) -> Iterator[Path]:
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError as exc:
            raise DocumentError(f"{d}: folder cannot be read ({exc.strerror or exc})") from None
        for entry in entries:
            p = Path(entry.path)
            if entry.name.startswith("."):
                log.info("%s: hidden: not read (name it to read it)", p)
                continue
            if entry.is_dir():  # follows links
                st = p.stat()
                key = (st.st_dev, st.st_ino)
                if key in ancestors:
                    log.warning("%s: not followed: a link back to the folder %s above it", p, p.resolve())
                    continue
                yield from visit(p, ancestors | {key})
            elif entry.is_file():
                yield p
            elif entry.is_symlink():
                log.warning("%s: skipped: a broken link", p)
    st = folder.stat()
    yield from visit(folder, frozenset({(st.st_dev, st.st_ino)}))


def _first_time(path: Path, seen: set[tuple[int, int]]) -> bool:
    try:
        st = path.stat()
    except OSError:
        return True  # read_file names the problem
    key = (st.st_dev, st.st_ino)
    if key in seen:
        log.info("%s: already read (the same file reached twice)", path)
        return False
    seen.add(key)
    return True


def read_file(path: str | Path) -> list[Document]:
    """Read one file; a JSONL file gives one document per line."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DocumentError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    name = path.name.lower()
    for suffix, (magic, opener) in COMPRESSIONS.items():
        if name.endswith(suffix) or magic.match(data):
            data = _decompress(path, data, suffix, opener)
            name = name.removesuffix(suffix)
            break
    if not data.strip():
        raise NotText(f"{path}: file is empty")
    kind = "rst" if name.endswith(".rst.txt") else NAMED_TYPES.get(os.path.splitext(name)[1], "text")
    if kind == "pdf":
        return [_read_pdf(path, data)]
    text = _decode(path, data)
    if kind == "jsonl":
        return _read_jsonl(str(path), text.splitlines())
    if kind == "html":
        return [_read_html(path, text)]
    if kind == "text" and roff.looks_like_roff(text):
        page, headings = roff.to_text(text)
        if not page.strip():
            raise NotText(f"{path}: man page without text (only requests, such as a .so link to another page)")
        return [_text_document(str(path), page, "text", headings=headings)]
    if kind == "rst":
        return [_text_document(str(path), text, "text", headings=_rst_headings(text))]
    return [_text_document(str(path), text, kind)]


def _decompress(path: Path, data: bytes, suffix: str, opener: Callable[[IO[bytes]], Any]) -> bytes:
    import io

    try:
        with opener(io.BytesIO(data)) as f:
            out = f.read(MAX_DECOMPRESSED + 1)
    except (OSError, EOFError, lzma.LZMAError) as exc:
        raise NotText(f"{path}: not a readable {suffix} file ({exc})") from None
    if len(out) > MAX_DECOMPRESSED:
        raise NotText(f"{path}: decompresses to more than {MAX_DECOMPRESSED >> 30} GiB; "
                      "decompress it yourself if it is meant to be read")
    return out


# Byte-order marks of the encodings read besides UTF-8; UTF-32 first (its LE mark starts like UTF-16's).
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
# Control characters that text does not hold (tab, newlines, form feed and escape are allowed).
_CONTROL = bytes(set(range(32)) - {9, 10, 12, 13, 27}) + b"\x7f"


def _decode(path: Path, data: bytes) -> str:
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                return data.decode(encoding)  # the codec reads and drops the mark
            except UnicodeDecodeError as exc:
                raise NotText(f"{path}: starts with a {encoding.upper()} byte-order mark but is not valid "
                              f"{encoding.upper()} (offset {exc.start}); convert it to UTF-8 first") from None
    if b"\x00" in data:
        raise NotText(f"{path}: binary (contains NUL bytes)")
    head = data[:8192]
    if len(head.translate(None, _CONTROL)) < 0.9 * len(head):
        raise NotText(f"{path}: binary (over 10% control characters)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise NotText(
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


# An underline (and optional overline) of one repeated punctuation character, at least as long as the title.
_RST_ADORNMENT = re.compile(r"""^([=\-`:'"~^_*+#<>.])\1+\s*$""")


def _rst_headings(text: str) -> tuple[tuple[int, str], ...]:
    """reStructuredText section titles (a line underlined, or over- and underlined, with one repeated
    punctuation character), with the offsets of their title lines."""
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    headings = []
    for i in range(1, len(lines)):
        title = lines[i - 1].strip()
        under = lines[i].rstrip()
        if (title and not _RST_ADORNMENT.match(title) and _RST_ADORNMENT.match(under)
                and len(under) >= len(title) and not lines[i - 1][:1].isspace()):
            headings.append((offsets[i - 1], title))
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

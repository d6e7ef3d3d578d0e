"""Read files into documents: plain text plus where its pages and headings start.

What is read, by name and by content:

- ``.md``/``.markdown`` (Markdown headings), ``.rst``/``.rst.txt`` (reStructuredText headings),
  ``.org`` (Org mode headlines), ``.pdf`` (pypdf; without running heads, feet, page numbers and
  the dot-leader lines of contents and indexes, and words broken at a line's end whole), ``.docx``
  (python-docx; the body as Markdown), ``.epub`` (the chapters in reading order, as Markdown by
  markdownify), ``.html``/``.htm`` (the page's main content, as Markdown, by trafilatura),
  ``.ipynb`` (a Jupyter notebook's cells as Markdown, code fenced, outputs left out), ``.jsonl``
  (one document per line: ``text``, optional ``id``, any other keys kept as metadata);
- man pages (roff: a ``.TH`` or ``.Dd`` request at the top), as text with their section headings;
- GNU Info manuals (what makeinfo writes: nodes split by 0x1f under "File: ..., Node: ..." lines),
  as the nodes' text with their titles as headings, without the node lines, menus and tables;
- any other file whose content is UTF-8 text (or UTF-16/32 with a byte-order mark), whatever its
  name: ``.txt``, ``README``, ``NEWS``, ``copyright``, source code; text written for a terminal
  (a coloured log, nroff's output) without its escape sequences and overstrikes;
- any of these compressed with gzip, bzip2 or xz (``NEWS.gz``, ``ls.1.gz``, ``notes.md.xz``): the
  name without the compression suffix decides as above.

Files and folders are given as paths; folders are searched in sorted order, hidden files and
folders (``.git``) left out, with ``include``/``exclude`` globs to choose. Each folder is visited
and each file read once however often links reach it, and the walk keeps no call stack, so any
depth is fine. Only regular files are read from a folder (a named pipe or device there is skipped
with its reason); binary files are found from their first 8 KiB, before the rest is read.
Text that is not UTF-8 is read with the charset ``charset_normalizer`` detects, named in a
warning; a few bad bytes in UTF-8 text are replaced with U+FFFD and counted in one.
In a folder, a file that is not text (binary, no charset fits, empty, a link loop) is skipped and
named with the reason in one warning; named on its own, it is an error. So is a text file without
prose (``_asset``: SVG and other XML-like images, JSON data, PostScript, minified, generated or
data files, base64 blobs, lock files), unless an include glob chose it; named on its own, it is
read. Every other problem, such as a bad JSONL line or an unreadable PDF, raises
``DocumentError`` naming the file.

Memory is bounded: one file is read at a time (``iter_documents``), no file decompresses past
``MAX_DECOMPRESSED``, and all the inputs together hold at most ``max_bytes`` of text (the CLI's
``--max-input-mb``); past it the read stops with an error naming the file where it was passed.
"""

from __future__ import annotations

import bz2
import codecs
import errno
import fnmatch
import gzip
import json
import logging
import lzma
import os
import re
import stat
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import IO, Any

from chunktree.checks import InvalidValueError, MissingExtraError, integer, json_loads, unicode, visible
from chunktree.engine import roff
from chunktree.engine.markup import shown

log = logging.getLogger(__name__)

NAMED_TYPES = {".md": "markdown", ".markdown": "markdown", ".rst": "rst", ".pdf": "pdf", ".html": "html",
               ".htm": "html", ".jsonl": "jsonl", ".ipynb": "notebook", ".org": "org", ".docx": "docx",
               ".epub": "epub"}
# Compression by suffix, and by the magic bytes at the start of the file.
COMPRESSIONS: dict[str, tuple[re.Pattern[bytes], Callable[[IO[bytes]], Any]]] = {
    ".gz": (re.compile(b"\x1f\x8b\x08"), lambda f: gzip.GzipFile(fileobj=f)),
    ".bz2": (re.compile(b"BZh[1-9]1AY&SY"), lambda f: bz2.BZ2File(f)),
    ".xz": (re.compile(b"\xfd7zXZ\x00"), lambda f: lzma.LZMAFile(f)),
}
MAX_DECOMPRESSED = 1 << 30  # bytes; a larger member is refused (a decompression bomb or not a document)
MAX_BYTES = 512 << 20  # bytes of text in all the inputs together, by default (``max_bytes``)
SNIFF_BYTES = 8192  # the prefix that decides whether a file is binary
NAMED_SKIPS = 50  # files skipped in a folder that the warning names; the rest are logged at INFO
SAMPLE_SOURCE = "sample:moby-dick"
READS = ("text (any name: .txt, README, source code), .md, .rst, .html, .pdf, .docx, .epub, .ipynb, .jsonl, "
         "man pages, Info manuals; each also .gz/.bz2/.xz")


class DocumentError(InvalidValueError):
    """An input file cannot be read as a document."""


class NotText(DocumentError):
    """The file is not a document chunktree reads (binary, no charset fits, empty): a folder skips it."""


class NotProse(NotText):
    """A text file found in a folder that holds no prose (``_asset``): skipped unless chosen."""


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


def read_paths(paths: Iterable[str | Path], include: Iterable[str] = (), exclude: Iterable[str] = (), *,
               max_bytes: int = MAX_BYTES) -> list[Document]:
    """Read every document under ``paths`` (``iter_documents``, as a list).

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
    max_bytes
        the most text, in bytes after decompression, that all the inputs together may hold; past
        it ``DocumentError`` names the file where it was passed.
    """
    return list(iter_documents(paths, include, exclude, max_bytes=max_bytes))


def iter_documents(paths: Iterable[str | Path], include: Iterable[str] = (), exclude: Iterable[str] = (), *,
                   max_bytes: int = MAX_BYTES) -> Iterator[Document]:
    """The documents under ``paths`` one file at a time, so that a caller that chunks each as it
    comes holds one document's text, not the corpus's. Parameters as ``read_paths``."""
    paths = list(paths)
    include, exclude = list(include), list(exclude)
    integer(max_bytes, "max_bytes", 1)
    skipped: list[str] = []
    no_prose = 0  # of them, files that are text but not prose
    decoded: list[str] = []  # files read in another charset or with bad bytes replaced, and how
    left = max_bytes
    found = False
    left_out: list[Path] = []
    for path, in_folder in _expand(paths, include, exclude, left_out):
        try:
            # Assets found in a folder are skipped, unless the user's include globs chose the file.
            docs, size = _read(path, left, max_bytes, in_folder, assets=in_folder and not include, notes=decoded)
        except NotText as exc:
            if not in_folder:
                raise
            skipped.append(str(exc))
            no_prose += isinstance(exc, NotProse)
            continue
        left -= size
        found = True
        yield from docs
    if skipped:
        _say("skipped %d file(s) that are not text documents or hold no prose: %s", skipped,
             " (a file without prose is read when named, or chosen by an include glob)" if no_prose else "")
    if decoded:
        _say("read %d file(s) that are not all UTF-8: %s", decoded)
    if not found:
        what = f"{len(skipped)} file(s) skipped, named above" if skipped else "no files found"
        if left_out:
            what += f", and {len(left_out)} left out by the include/exclude globs"
        raise DocumentError(f"no documents in {', '.join(map(str, paths))}: {what}; chunktree reads {READS}")


def _say(message: str, files: list[str], end: str = "") -> None:
    """One warning: ``message`` with the number of ``files`` and the first ``NAMED_SKIPS`` of them
    (the rest logged at INFO, which ``-v`` shows)."""
    named = "; ".join(files[:NAMED_SKIPS])
    more = f"; and {len(files) - NAMED_SKIPS} more (-v names them)" if len(files) > NAMED_SKIPS else ""
    log.warning(message + "%s%s", len(files), named, more, end)
    for line in files[NAMED_SKIPS:]:
        log.info("%s", line)


def _expand(paths: Iterable[str | Path], include: list[str], exclude: list[str],
            left_out: list[Path] | None = None) -> Iterator[tuple[Path, bool]]:
    """Each file to read once, and whether it was found in a folder (not named directly); the
    files the globs leave out are appended to ``left_out``."""
    seen: set[tuple[int, int]] = set()
    any_path = False
    for raw in paths:
        any_path = True
        path = Path(raw)
        try:
            path.lstat()
        except FileNotFoundError:
            raise DocumentError(f"{path}: no such file or folder") from None
        except OSError as exc:  # a name too long, a folder on the way that cannot be searched
            raise DocumentError(f"{_shown(path)[:200]}: cannot be read ({exc.strerror or exc})") from None
        if path.is_dir():
            for file in _walk(path):
                rel = file.relative_to(path).as_posix()
                if (include and not _matches(rel, include)) or _matches(rel, exclude):
                    if left_out is not None:
                        left_out.append(file)
                    continue
                if _first_time(file, seen):
                    yield file, True
        elif _first_time(path, seen):  # a file, or a link that read_file names if it leads nowhere
            yield path, False
    if not any_path:
        raise DocumentError("no input paths given")


def _matches(rel: str, globs: list[str]) -> bool:
    """Whether a file's path inside its folder, or its name, matches one of ``globs``."""
    name = rel.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatch(rel, g) or fnmatch.fnmatch(name, g) for g in globs)


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _not_regular(mode: int) -> str:
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def _walk(folder: Path) -> Iterator[Path]:
    """The files under ``folder`` in sorted order (depth first), leaving out hidden ones (``.git``,
    ``.cache``...), following links to folders but entering each folder once: a link back to a
    folder above is named in a warning, a second way into a folder already walked is logged. The
    folders still to walk are a stack of iterators, not calls, so the depth is not bounded."""
    def entries(d: Path) -> Iterator[os.DirEntry[str]]:
        try:
            with os.scandir(d) as it:
                found = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            raise DocumentError(f"{d}: folder cannot be read ({exc.strerror or exc})") from None
        return iter(found)

    st = folder.stat()
    visited = {(st.st_dev, st.st_ino)}
    stack = [((st.st_dev, st.st_ino), entries(folder))]
    while stack:
        entry = next(stack[-1][1], None)
        if entry is None:
            stack.pop()
            continue
        p = Path(entry.path)
        if entry.name.startswith("."):
            log.info("%s: hidden: not read (name it to read it)", p)
            continue
        try:
            st = p.stat()  # follows links
        except OSError as exc:
            if entry.is_symlink():
                reason = "a link loop" if exc.errno == errno.ELOOP else "a broken link"
                log.warning("%s: skipped: %s", p, reason)
            else:
                log.warning("%s: skipped: %s", p, exc.strerror or exc)
            continue
        key = (st.st_dev, st.st_ino)
        if stat.S_ISDIR(st.st_mode):
            if any(key == k for k, _ in stack):
                log.warning("%s: not followed: a link back to the folder %s above it", p, p.resolve())
            elif key in visited:
                log.info("%s: already walked (the same folder reached twice)", p)
            else:
                visited.add(key)
                stack.append((key, entries(p)))
        else:
            yield p  # read_file names what is not a regular file


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


def read_file(path: str | Path, *, max_bytes: int = MAX_BYTES) -> list[Document]:
    """Read one file; a JSONL file gives one document per line. ``max_bytes`` as ``read_paths``."""
    return _read(Path(path), max_bytes, max_bytes, False)[0]


def _read(path: Path, left: int, budget: int, in_folder: bool, assets: bool = False,
          notes: list[str] | None = None) -> tuple[list[Document], int]:
    """The file's documents and the bytes of text they hold; at most ``left`` bytes are read
    (``budget``: the total that ``left`` remains of, for the message). With ``assets``, a file
    that is text but not prose (``_asset``) is ``NotText``. How text that is not all UTF-8 was read
    goes into ``notes`` (None: a warning now)."""
    name = path.name.lower()
    sniff = not any(name.endswith(s) for s in COMPRESSIONS) and not name.endswith((".pdf", ".docx", ".epub"))
    data = _read_bytes(path, left, budget, in_folder, sniff)
    for suffix, (magic, opener) in COMPRESSIONS.items():
        if name.endswith(suffix) or magic.match(data):
            data = _decompress(path, data, suffix, opener, left, budget)
            name = name.removesuffix(suffix)
            break
    if not data.strip():
        raise NotText(f"{path}: file is empty")
    kind = "rst" if name.endswith(".rst.txt") else NAMED_TYPES.get(os.path.splitext(name)[1], "text")
    if kind == "pdf":
        return [_read_pdf(path, data)], len(data)
    if kind in _PACKAGES:
        what, reader = _PACKAGES[kind]
        markdown = reader(path, data)
        if not visible(markdown):
            raise NotText(f"{path}: {what} without text")
        return [_text_document(_shown(path), markdown, "markdown")], len(data)
    text, note = _decode(path, data)
    if note and notes is not None:
        notes.append(f"{_shown(path)} ({note})")
    elif note:
        log.warning("%s: %s", _shown(path), note)
    source = _shown(path)
    if kind != "jsonl" and not visible(text):
        raise NotText(f"{path}: holds no visible text (only spaces, zero-width or control characters)")
    if kind == "jsonl":
        return _read_jsonl(source, text.splitlines()), len(data)
    if kind == "html":
        if assets and (tag := _TEMPLATE_TAG.search(_HTML_CODE.sub(" ", text[:SAMPLE_CHARS]))):
            raise NotProse(f"{path}: a template (Jinja or Django tags outside code, such as {tag.group(0)[:40]!r}): "
                           "the pages made from it are read, not the template")
        return [_read_html(path, text)], len(data)
    if kind == "notebook":
        notebook = _read_notebook(path, text)
        if not visible(notebook):
            raise NotText(f"{path}: Jupyter notebook without text (no cell holds any)")
        return [_text_document(source, notebook, "markdown")], len(data)
    if kind == "text" and ("\x1b" in text or "\x08" in text):
        text = _without_terminal_codes(text)
    if kind == "text" and _INFO_NODE.search(text):
        info = _info_text(text)
        if not visible(info):
            raise NotText(f"{path}: Info file without text (only menus and tables of its nodes)")
        return [_text_document(source, info, "text", headings=_rst_headings(info))], len(data)
    if kind == "text" and roff.looks_like_roff(text):
        page, headings = roff.to_text(text)
        if not visible(page):
            raise NotText(f"{path}: man page without text (only requests, such as a .so link to another page)")
        return [_text_document(source, page, "text", headings=headings)], len(data)
    if assets and (reason := _asset(name, text)):
        raise NotProse(f"{path}: {reason}")
    if kind == "rst":
        return [_text_document(source, text, "text", headings=_rst_headings(text))], len(data)
    if kind == "org":
        return [_text_document(source, text, "text", headings=_org_headings(text))], len(data)
    return [_text_document(source, text, kind)], len(data)


# Files that lock a project's dependencies: generated, and no prose.
LOCK_FILES = frozenset({"package-lock.json", "npm-shrinkwrap.json", "yarn.lock", "pnpm-lock.yaml", "poetry.lock",
                        "pipfile.lock", "uv.lock", "pdm.lock", "cargo.lock", "composer.lock", "gemfile.lock",
                        "go.sum", "flake.lock", "podfile.lock", "mix.lock", "pubspec.lock"})
# A word of prose: letters, inner apostrophes or hyphens, punctuation around it.
_WORD = re.compile(r"[(\"'\[“‘]*[^\W\d_]+(?:['’-][^\W\d_]+)*[.,;:!?)\"'\]”’]*")
# A tag: an element's (a name, then attributes or the end), a declaration or a processing instruction;
# a comment's text counts as text, and a link in angle brackets (<https://...>) is no tag.
_TAG = re.compile(r"</?[A-Za-z][\w.:-]*(?:\s[^<>]{0,4096})?/?>|<![A-Za-z\[][^<>]{0,4096}>|<\?[^<>]{0,4096}>")
_ENCODED = re.compile(r"[A-Za-z0-9+/]{40,}={0,2}")
_JSON_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
SAMPLE_CHARS = 1 << 16  # the prefix of a file that ``_asset`` judges


def _prose(text: str) -> float:
    """The share of ``text``'s non-space characters that are in words of prose (``_WORD``)."""
    tokens = text.split()
    return sum(len(t) for t in tokens if _WORD.fullmatch(t)) / max(1, sum(map(len, tokens)))


# A reStructuredText line that is no prose: a directive or comment (".. name:: argument"), one of its
# indented options (":param: value"), or a blank line.
_RST_DIRECTIVE = re.compile(r"\.\. |[ \t]+:[\w-]+:|\s*$")


def _asset(name: str, text: str) -> str | None:
    """Why a text file is an asset rather than prose, or None: a lock file (by its name);
    PostScript (``%!PS``: print output, whose words are operands of a program); markup
    with almost no words outside its tags (SVG and other XML-like images); JSON data whose strings
    hold few sentences (of four words or more: a schema's descriptions are prose, a dashboard's or a
    package manifest's keys and values are not); encoded data (base64);
    minified, generated or data text (lines of hundreds of characters, under half of them words);
    data of any line length with almost no words (under 5%: CSV of numbers, symbol lists; 4 KiB or
    more); a
    reStructuredText file of directives alone (a stub such as ``.. cmake-module:: ../Modules/X.cmake``,
    whose text lives in another file). Judged on the first ``SAMPLE_CHARS`` characters."""
    if name in LOCK_FILES:
        return "a lock file (generated, no prose)"
    head = text[:SAMPLE_CHARS]
    if head.startswith("%!PS"):
        return "PostScript, a printer's program rather than its text (ps2pdf makes a PDF of it, which is read)"
    if name.endswith((".rst", ".rst.txt")) and all(_RST_DIRECTIVE.match(line) for line in head.splitlines()):
        return "reStructuredText of directives alone, no prose (a stub whose text another file holds)"
    solid = max(1, len(head) - head.count(" ") - head.count("\n") - head.count("\t"))
    if head.lstrip().startswith("<") and _TAG.search(head):
        outside = _TAG.sub(" ", head)
        words = sum(len(t) for t in outside.split() if _WORD.fullmatch(t))
        if words < 0.1 * solid:
            return f"markup without prose (an SVG or XML image or data: {words / solid:.0%} of it is words outside tags)"
    if name.endswith(".json") and head.lstrip()[:1] in ("{", "["):
        prose = sum(len(m) - m.count(" ") for m in _JSON_STRING.findall(head) if len(m.split()) >= 4)
        if prose < 0.2 * solid:
            return f"JSON data without prose ({prose / solid:.0%} of it is sentences in its strings)"
    encoded = sum(len(m) for m in _ENCODED.findall(head) if _base64(m))
    if encoded > 0.5 * solid:
        return f"encoded data ({encoded / solid:.0%} of it is base64-like runs)"
    lines = [line for line in head.splitlines() if line.strip()]
    mean = sum(map(len, lines)) / max(1, len(lines))
    share = _prose(head)
    if mean >= 250 and share < 0.5:
        return (f"long lines with little prose, as minified, generated or data files have ({mean:.0f} characters "
                f"a line on average, {share:.0%} of it words)")
    if share < 0.05 and len(head) >= 4096:  # a small file crowds nothing out
        return f"data without prose (a table of numbers or symbols: {share:.0%} of it is words)"
    return None


def _base64(run: str) -> bool:
    """Whether a run of base64's characters reads as encoded data rather than a path or a rule:
    upper and lower case letters and digits mixed, few slashes."""
    return (run.count("/") < 0.1 * len(run) and any(c.isdigit() for c in run) and any(c.isupper() for c in run)
            and any(c.islower() for c in run))


def _too_much(path: Path, budget: int) -> DocumentError:
    return DocumentError(f"{path}: the inputs hold more than {_size(budget)} of text, the most read in one run "
                         "(max_bytes, --max-input-mb): raise it if the memory is there (the text takes about "
                         "five times its size while it is chunked), or embed the corpus in parts")


def _size(n: int) -> str:
    return f"{n / 2**30:g} GiB" if n >= 2**30 else f"{n / 2**20:g} MiB"


def _read_bytes(path: Path, left: int, budget: int, in_folder: bool, sniff: bool) -> bytes:
    """At most ``left`` bytes of a regular file (or of a named pipe named on its own, such as
    ``/dev/stdin``); with ``sniff``, the first ``SNIFF_BYTES`` alone when they show it is binary."""
    try:
        mode = path.stat().st_mode
        if not stat.S_ISREG(mode) and (in_folder or not stat.S_ISFIFO(mode)):
            raise NotText(f"{path}: {_not_regular(mode)}: only regular files are read")
        with open(path, "rb") as f:
            head = f.read(SNIFF_BYTES)
            if sniff and not any(magic.match(head) for magic, _ in COMPRESSIONS.values()):
                _check_text(path, head)
            data = head + f.read(max(0, left - len(head)) + 1)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotText(f"{path}: a link loop") from None
        raise DocumentError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if len(data) > left:
        raise _too_much(path, budget)
    return data


def _decompress(path: Path, data: bytes, suffix: str, opener: Callable[[IO[bytes]], Any], left: int,
                budget: int) -> bytes:
    import io

    cap = min(left, MAX_DECOMPRESSED)
    try:
        with opener(io.BytesIO(data)) as f:
            out = f.read(cap + 1)
    except (OSError, EOFError, lzma.LZMAError) as exc:
        raise NotText(f"{path}: not a readable {suffix} file ({exc})") from None
    if len(out) > cap:
        if cap == MAX_DECOMPRESSED:
            raise NotText(f"{path}: decompresses to more than {MAX_DECOMPRESSED >> 30} GiB; "
                          "decompress it yourself if it is meant to be read")
        raise _too_much(path, budget)
    return out


# Byte-order marks of the encodings read besides UTF-8; UTF-32 first (its LE mark starts like UTF-16's).
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
# Control characters that text does not hold (tab, newlines, form feed and escape are allowed).
_CONTROL = bytes(set(range(32)) - {9, 10, 12, 13, 27}) + b"\x7f"


# The first bytes of common binary files, named in the message when a file starts with them.
# Those that read as letters are matched with the bytes after them, so no text is taken for one.
_MAGIC = tuple((re.compile(pattern, re.DOTALL), kind) for pattern, kind in (
    (b"\x89PNG\r\n", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"GIF8[79]a", "a GIF image"),
    (b"PK\x03\x04", "a ZIP archive"), (b"\x7fELF", "an executable"),
    (b"RIFF....(?:WEBP|WAVE|AVI )", "a RIFF file (WebP, WAV, AVI)"), (b"wOF[F2]\x00", "a web font"),
    (b"OggS\x00", "an Ogg file"), (b"ID3[\x02-\x04]\x00", "an MP3 file"), (b"SQLite format 3\x00", "an SQLite database"),
    (b"\xd0\xcf\x11\xe0", "an Office document")))


def _check_text(path: Path, data: bytes) -> None:
    """``NotText`` for data that is binary: NUL bytes (without a UTF-16/32 mark; the markers of a
    GNU Info file's index and images aside), or over 10% control characters in its first
    ``SNIFF_BYTES``."""
    if any(data.startswith(bom) for bom, _ in _BOMS):
        return
    for magic, kind in _MAGIC:
        if magic.match(data):
            raise NotText(f"{path}: binary ({kind})")
    if b"\x00" in data and b"\x00" in _INFO_SPECIAL.sub(b"", data):
        raise NotText(f"{path}: binary (contains NUL bytes)")
    head = data[:SNIFF_BYTES]
    if len(head.translate(None, _CONTROL)) < 0.9 * len(head):
        raise NotText(f"{path}: binary (over 10% control characters)")


def _shown(path: Path) -> str:
    """The path as a document's source: bytes of a name that are not UTF-8 as ``\\xff`` and control
    characters (a newline in a name) escaped, so that every output can hold it."""
    name = str(path)
    if name.isprintable():
        return name
    raw = os.fsencode(name).decode("utf-8", "backslashreplace")
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in raw)


def _decode(path: Path, data: bytes) -> tuple[str, str | None]:
    """The text of ``data``, and how it was read when it is not all UTF-8: UTF-8 (or UTF-16/32 with
    a byte-order mark); UTF-8 with a few bytes that are not, those replaced with U+FFFD and
    counted; otherwise the charset that ``charset_normalizer`` detects, named."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                return data.decode(encoding), None  # the codec reads and drops the mark
            except UnicodeDecodeError as exc:
                raise NotText(f"{path}: starts with a {encoding.upper()} byte-order mark but is not valid "
                              f"{encoding.upper()} (offset {exc.start}); convert it to UTF-8 first") from None
    _check_text(path, data)
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError as exc:
        first = exc.start
    text = data.decode("utf-8-sig", "replace")
    bad = text.count("\ufffd") - data.count("\ufffd".encode())
    wide = len(text) - text.count("\ufffd") - len(data.translate(None, bytes(range(128, 256))))
    if wide >= bad:  # UTF-8 that holds more good non-ASCII characters than bad bytes: damaged, not another charset
        return text, f"{bad} byte sequence(s) that are not UTF-8, the first at offset {first}, replaced with U+FFFD"
    charset = _charset(data)
    if charset is None:
        raise NotText(f"{path}: not valid UTF-8 (byte 0x{data[first]:02x} at offset {first}) and no other charset "
                      "fits it; convert it to UTF-8 first")
    return data.decode(charset, "replace"), f"not UTF-8; read as {charset}, the charset detected"


def _charset(data: bytes) -> str | None:
    """The charset of text that is not UTF-8: ``charset_normalizer``'s best guess, except that
    Windows-1252 (the Western one, a superset of Latin-1) wins when it reads the bytes as cleanly;
    on short Western text the detector's first guess is often a neighbour (cp1250, UTF-16)."""
    import charset_normalizer
    from charset_normalizer.md import mess_ratio

    guesses = [m for m in charset_normalizer.from_bytes(data) if not m.encoding.startswith(("utf_16", "utf_32"))]
    if not guesses or guesses[0].encoding == "utf_8":
        return None
    best = guesses[0].encoding
    sample = data[:1 << 16]
    try:
        western = sample.decode("cp1252")
    except UnicodeDecodeError:
        return best
    if not set(western) - _WESTERN and mess_ratio(western, 1.0) <= mess_ratio(sample.decode(best, "replace"), 1.0) + 0.1:
        return "cp1252"
    return best


# What Windows-1252 text of a Western European language holds: ASCII, and the letters and
# punctuation of French, German, Spanish, Portuguese, Italian, Dutch, the Nordic languages
# (Icelandic's eth, thorn and y-acute aside: in a Turkish text they are misread letters).
_WESTERN = frozenset(map(chr, range(128))) | frozenset(
    "àáâãäåæçèéêëìíîïñòóôõöøùúûüÿÀÁÂÃÄÅÆÇÈÉÊËÌÍÎÏÑÒÓÔÕÖØÙÚÛÜßœŒšŠžŽŸ€£¥©®°±·«»¿¡§¶ªº¹²³¼½¾µ×÷"
    "\u00a0‘’“”„–—…•‹›†‡‰™¢¤¦¨¯´¸")


def _text_document(source: str, text: str, kind: str, meta: dict[str, Any] | None = None,
                   headings: tuple[tuple[int, str], ...] = ()) -> Document:
    if not visible(text):
        raise DocumentError(f"{source}: holds no text")
    if kind == "markdown":
        headings = _markdown_headings(text)
    return Document(source, text, kind, headings=headings, meta=meta or {})


# Greedy to the end of the line, the closing #s stripped after: a lazy title backtracks over a long
# run of spaces, quadratic in the line.
_ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*)$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")


def _markdown_headings(text: str) -> tuple[tuple[int, str], ...]:
    """ATX headings (``# Title``) outside fenced code blocks, with their character offsets; links
    and roles in a title read as their text (``markup.shown``)."""
    headings = []
    offset = 0
    in_fence = False
    for line in text.splitlines(keepends=True):
        if _FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence:
            m = _ATX_HEADING.match(line.rstrip("\r\n"))
            title = shown(m.group(2).rstrip(" \t#")).strip() if m else ""
            if title:
                headings.append((offset, title))
        offset += len(line)
    return tuple(headings)


_RST_PUNCTUATION = frozenset("=-`:'\"~^_*+#<>.")


def _rst_adornment(line: str) -> bool:
    """An underline (or overline): one punctuation character repeated, at least twice, then only
    spaces. Counted, not matched by a backtracking pattern, so a long line that breaks the run at
    its end costs one pass."""
    body = line.rstrip()
    return len(body) >= 2 and body[0] in _RST_PUNCTUATION and body.count(body[0]) == len(body)


def _rst_headings(text: str) -> tuple[tuple[int, str], ...]:
    """reStructuredText section titles (a line underlined, or over- and underlined, with one repeated
    punctuation character), with the offsets of their title lines; links and roles in a title read
    as their text (``markup.shown``)."""
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    headings = []
    for i in range(1, len(lines)):
        title = lines[i - 1].strip()
        under = lines[i].rstrip()
        if (title and not _rst_adornment(title) and _rst_adornment(under)
                and len(under) >= len(title) and not lines[i - 1][:1].isspace() and shown(title).strip()):
            headings.append((offsets[i - 1], shown(title).strip()))
    return tuple(headings)


# Greedy to the end of the line, the keyword, priority and tags taken off after (see _ATX_HEADING).
_ORG_HEADING = re.compile(r"^\*+[ \t]+(.*)$", re.M)
_ORG_KEYWORD = re.compile(r"^(?:(?:TODO|DONE)[ \t]+)?(?:\[#[A-Z]\][ \t]+)?")
_ORG_TAGS = re.compile(r":[\w@#%:]+:")
_ORG_LINK = re.compile(r"\[\[(?:[^\]]*\]\[)?([^\]]*)\]\]")


def _org_headings(text: str) -> tuple[tuple[int, str], ...]:
    """Org mode headlines (``* Title``, ``** TODO [#A] Title :tag:``), with their character
    offsets: the title without its keyword, priority and tags; links read as their text."""
    headings = []
    for m in _ORG_HEADING.finditer(text):
        title = m.group(1).strip()
        title = _ORG_KEYWORD.sub("", title, count=1)
        head, _, last = title.rpartition(" ")
        if head and _ORG_TAGS.fullmatch(last):
            title = head.rstrip()
        title = _ORG_LINK.sub(r"\1", title).strip()
        if title:
            headings.append((m.start(), title))
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
        try:
            unicode(text, "field 'text'")
        except InvalidValueError as exc:
            raise DocumentError(f"{where}: {exc}") from None
        # A generated id says where it came from, so it cannot be taken for an explicit "id": 3.
        raw_id = record.pop("id", f"line-{lineno}")
        if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)):
            raise DocumentError(f"{where}: field 'id' must be a string or an integer; got {raw_id!r:.60}")
        doc_id = str(raw_id)
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


def _read_notebook(path: Path, text: str) -> str:
    """A Jupyter notebook's cells as Markdown, in order: Markdown and raw cells as they are, code
    cells in fenced blocks of the notebook's language; outputs left out. nbformat 4 (``cells``)
    and 3 (``worksheets``, ``input``, heading cells)."""
    try:
        notebook = json_loads(text)
    except ValueError as exc:
        raise DocumentError(f"{path}: not a readable Jupyter notebook (invalid JSON: {exc})") from None
    if not isinstance(notebook, dict):
        raise DocumentError(f"{path}: not a Jupyter notebook (a JSON {type(notebook).__name__}, not an object)")
    cells = notebook.get("cells")
    if cells is None and isinstance(notebook.get("worksheets"), list):
        cells = [c for sheet in notebook["worksheets"] if isinstance(sheet, dict) for c in sheet.get("cells") or []]
    if not isinstance(cells, list):
        raise DocumentError(f"{path}: not a Jupyter notebook (no list of 'cells' or 'worksheets')")
    meta = notebook.get("metadata")
    info = (meta.get("language_info") or meta.get("kernelspec") or {}) if isinstance(meta, dict) else {}
    language = str(info.get("name") or info.get("language") or "") if isinstance(info, dict) else ""
    parts = []
    for n, cell in enumerate(cells):
        if not isinstance(cell, dict):
            raise DocumentError(f"{path}: cell {n} is not a JSON object")
        body = cell.get("source", cell.get("input", ""))
        if isinstance(body, list) and all(isinstance(line, str) for line in body):
            # lines as ``splitlines(True)`` keeps them, or (nbformat 2) without their ends
            body = ("" if body and body[0].endswith(("\n", "\r")) else "\n").join(body)
        if not isinstance(body, str):
            raise DocumentError(f"{path}: cell {n}'s source is not text")
        if not body.strip():
            continue
        kind = cell.get("cell_type")
        if kind == "code":
            parts.append(f"```{cell.get('language') or language}\n{body.rstrip()}\n```")
        elif kind == "heading":  # nbformat 3
            parts.append("#" * min(6, max(1, int(cell.get("level") or 1))) + " " + body.strip())
        else:
            parts.append(body.strip())
    return "\n\n".join(parts) + "\n" if parts else ""


# What a terminal reads as formatting, in text written for one (nroff's and grotty's output, a
# coloured log): escape sequences (colours, bold: "\x1b[1m"), and overstrikes, a character typed
# over another through a backspace (bold "b\bb", underlined "_\bb").
_ESCAPE_SEQUENCE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_UNDERSCORE_OVER = re.compile(r"([^_\x00\x08])\x08_")  # not an Info file's "\0\b[index\0\b]" marker
_OVERSTRUCK = re.compile(r"[^\x00\x08]\x08(?=[^\x08])")


def _without_terminal_codes(text: str) -> str:
    """``text`` as a terminal shows it: without escape sequences, each overstruck character once."""
    text = _ESCAPE_SEQUENCE.sub("", text)
    return _OVERSTRUCK.sub("", _UNDERSCORE_OVER.sub(r"\1", text))


# GNU Info (what makeinfo writes: coreutils.info.gz): nodes split by a 0x1f byte, each under a
# "File: ..., Node: ..., Next: ..." line; the tables that index them; the dir-entry lines that
# install it; a node's menu, at its end.
_INFO_HEADER = re.compile(r"File: [^,\t\n]*[,\t]\s*Node: ")
_INFO_NODE = re.compile(r"\x1f\r?\n(?:File: [^,\t\n]*[,\t]\s*Node: |Indirect:|Tag Table:)")
_INFO_TABLES = ("Tag Table:", "Indirect:", "Local Variables:", "End Tag Table")
_INFO_PREAMBLE = re.compile(r"^This is .*, produced by (?:makeinfo|texi2any).*\n(?:.+\n)*|"
                            r"^(?:INFO-DIR-SECTION .*\n)?START-INFO-DIR-ENTRY\n(?:.*\n)*?END-INFO-DIR-ENTRY\n?", re.M)
_INFO_MENU = re.compile(r"^\* Menu:", re.M)
# What Info writes around an index node's marker or an image: "\0\b[index\0\b]", "\0\b[image src=...\0\b]";
# in the file's bytes and in its text
_INFO_SPECIAL = re.compile(rb"\x00\x08\[[^\x00]{0,4096}\x00\x08\]")
_INFO_SPECIAL_TEXT = re.compile(_INFO_SPECIAL.pattern.decode("ascii"))


def _info_text(text: str) -> str:
    """An Info file's text as ``info`` shows its nodes, one after another: without the node lines
    ("File: bc.info,  Node: Top,  Next: ..."), the tables of nodes, the dir entries, the
    "produced by makeinfo" lines and the menus; titles keep their underlines (``*``, ``=``, ``-``,
    ``.``), which make them headings."""
    parts = []
    text = _INFO_SPECIAL_TEXT.sub("", text)
    for node in text.replace("\r\n", "\n").split("\x1f"):
        body = node.strip("\n")
        first, _, rest = body.partition("\n")
        if first.startswith(_INFO_TABLES):
            continue
        body = rest if _INFO_HEADER.match(first) else _INFO_PREAMBLE.sub("", body + "\n")
        menu = _INFO_MENU.search(body)
        body = (body[:menu.start()] if menu else body).strip("\n")
        if body.strip():
            parts.append(body)
    return "\n\n".join(parts) + "\n" if parts else ""


def _read_docx(path: Path, data: bytes) -> str:
    """A Word document's body as Markdown, in order (python-docx): its title and headings as ``#``
    lines, list paragraphs as items, tables a row a line; page headers and footers left out."""
    import io
    import zipfile

    from docx import Document as WordDocument
    from docx.opc.exceptions import PackageNotFoundError
    from docx.table import Table
    from lxml import etree

    try:
        document = WordDocument(io.BytesIO(data))
        blocks = list(document.iter_inner_content())
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError, etree.XMLSyntaxError) as exc:
        raise DocumentError(f"{path}: not a readable Word document ({exc})") from None
    parts = []
    for block in blocks:
        if isinstance(block, Table):
            rows = ["| " + " | ".join(" ".join(cell.text.split()) for cell in row.cells) + " |" for row in block.rows]
            parts.append("\n".join(rows))
            continue
        text = " ".join(block.text.split())
        style = (block.style.name if block.style is not None else None) or ""
        level = re.fullmatch(r"Heading ([1-9])", style)
        if not text:
            continue
        if style == "Title" or level:
            parts.append("#" * min(6, int(level.group(1)) if level else 1) + " " + text)
        elif style.startswith("List Number"):
            parts.append("1. " + text)
        elif style.startswith("List"):
            parts.append("- " + text)
        else:
            parts.append(text)
    return "\n\n".join(parts) + "\n" if parts else ""


def _read_pdf(path: Path, data: bytes) -> Document:
    import io

    from pypdf import PdfReader
    from pypdf.errors import DependencyError, PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages]
    except DependencyError as exc:  # AES encryption needs the cryptography package
        raise NotText(f"{path}: an encrypted PDF that pypdf cannot open ({exc}): pip install cryptography, "
                      "or decrypt it first") from None
    except (PyPdfError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise DocumentError(f"{path}: not a readable PDF ({exc})") from None
    pages = [page.translate(_LIGATURES) for page in pages]
    parts, starts, offset = [], [], 0
    for page_text in _dehyphenated([_LEADERS.sub("", page) for page in _without_running_lines(pages)]):
        starts.append(offset)
        parts.append(page_text)
        offset += len(page_text) + 2
    text = "\n\n".join(parts)
    if not text.strip():
        raise DocumentError(f"{path}: PDF has no extractable text (scanned images need OCR first)")
    return Document(_shown(path), text, "text", page_starts=tuple(starts))


# A typeset ligature as its letters ("ﬁles" as "files"): a PDF's text holds the glyph, which the
# tokenizer does not know as the letters and a question's words do not match.
_LIGATURES = str.maketrans({"\ufb00": "ff", "\ufb01": "fi", "\ufb02": "fl", "\ufb03": "ffi", "\ufb04": "ffl",
                            "\ufb05": "st", "\ufb06": "st"})
_NUMBER_AT_END = re.compile(r"^(\d{1,5})\b|\b(\d{1,5})$")
# A line of a table of contents or an index: dot leaders, then page numbers ("Invoking gzip . . . 4")
_LEADERS = re.compile(r"^.*(?: ?\.){4,}[ \t]*(?:\d{1,5}|[ivxlc]{1,7})(?:, ?\d{1,5})*[ \t]*\n?", re.M)


def _without_running_lines(pages: list[str]) -> list[str]:
    """``pages`` without their running heads and feet: a first or last line of a page that repeats
    at the top or foot of other pages with only its numbers changed (``_running``: a book's title,
    "Chapter 4: Function reference 9"), or whose number at its start or end is the page's printed
    number (its index plus the offset that most pages' outermost lines share, on at least a fifth
    of the pages and 3; once a page, a bare number first). Up to three lines deep (a title above a
    chapter's running head). The first page keeps its title."""
    lines = [page.split("\n") for page in pages]
    if len(pages) < 3:
        return pages
    often = max(3, len(pages) / 5)
    gone: set[tuple[int, int]] = set()  # (page, line) of the running lines found
    title: set[int] = set()  # the first page's lines that are its title
    printed, numbered_pages = None, set()
    for _ in range(3):
        ends = []  # (page, line index) of each page's first and last line, of those left
        for p, page in enumerate(lines):
            left = [i for i, line in enumerate(page)
                    if line.strip() and (p, i) not in gone and not (p == 0 and i in title)]
            ends += [(p, i) for i in sorted({left[0], left[-1]}) if len(page[i]) <= 120] if left else []
        shape = {(p, i): re.sub(r"\d+", "#", " ".join(lines[p][i].split())) for p, i in ends}
        pages_of: dict[str, set[int]] = {}
        for (p, _), key in shape.items():
            pages_of.setdefault(key, set()).add(p)
        offsets: dict[tuple[int, int], int] = {}
        for p, i in ends:
            m = _NUMBER_AT_END.search(lines[p][i].strip())
            if m:
                offsets[(p, i)] = int(m.group(1) or m.group(2)) - p
        if printed is None:  # the pages' numbering, once found kept
            counts = Counter(offsets.values()).most_common(1)
            printed = counts[0][0] if counts and counts[0][1] >= often else None
        numbered: set[tuple[int, int]] = set()
        if printed is not None:  # once a page: a bare number rather than a heading that starts with it
            number = printed
            for p, i in sorted(ends, key=lambda e: (e[0], lines[e[0]][e[1]].strip() != str(number + e[0]))):
                if offsets.get((p, i)) == number and p not in numbered_pages:
                    numbered.add((p, i))
                    numbered_pages.add(p)
        repeated = {(p, i) for p, i in ends if _running(pages_of[shape[(p, i)]], often)} - numbered
        found, titled = numbered | {(p, i) for p, i in repeated if p}, {i for p, i in repeated if p == 0}
        if not found and not titled:
            break
        gone |= found
        title |= titled
    return ["\n".join(line for i, line in enumerate(page) if (p, i) not in gone) for p, page in enumerate(lines)]


def _running(pages: set[int], often: float) -> bool:
    """Whether a line at the top or foot of ``pages`` runs through the document: on ``often``
    pages, or on three in a row (a chapter's title over each of its pages)."""
    return len(pages) >= often or any(p + 1 in pages and p + 2 in pages for p in pages)


# A word broken at the end of a line: "declara-" then "tions"; a word, hyphenated or not.
_BROKEN = re.compile(r"([^\W\d_]+)-\n([^\W\d_]+)")
_WORDS = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)*")


def _dehyphenated(pages: list[str]) -> list[str]:
    """``pages`` with words broken at a line's end put together: without the hyphen when the whole
    word appears elsewhere in the document, or when it does not and the part before the break is
    no word of it ("manip-" "ulation"); with it when the hyphenated word appears elsewhere or the
    first part is a word ("well-" "known")."""
    words: Counter[str] = Counter()
    for page in pages:
        for word in _WORDS.findall(_BROKEN.sub(" ", page).lower()):
            words.update([word, *word.split("-")] if "-" in word else [word])

    def join(m: re.Match[str]) -> str:
        left, right = m.group(1), m.group(2)
        whole, hyphenated = (left + right).lower(), f"{left}-{right}".lower()
        if words[whole] or (not words[hyphenated] and right[0].islower() and not words[left.lower()]):
            return left + right
        return f"{left}-{right}"
    return [_BROKEN.sub(join, page) for page in pages]


# Navigation trafilatura keeps: the "Next: ..., Previous: ..., Up: ..." line above each page of a
# GNU manual in HTML (Texinfo 6's ``<div class="header">``), and the permalink sign after each
# heading of a Sphinx or MkDocs page (``<a class="headerlink">¶</a>``).
_HTML_NAVIGATION = ['//div[@class="header"][starts-with(normalize-space(.), "Next:") or '
                    'starts-with(normalize-space(.), "Previous:") or starts-with(normalize-space(.), "Up:")]',
                    '//a[contains(concat(" ", normalize-space(@class), " "), " headerlink ")]']
# trafilatura's Markdown escapes the characters Markdown would read as syntax (``my\_file``,
# ``\[x\]``): an odd run of 2n + 1 backslashes before one of them was n. Code, in a span or a fenced
# block, is left as trafilatura leaves it: as written.
_ESCAPE_OR_CODE = re.compile(r"(?<!\\)`[^`\n]*`|(\\+)([*_`~\[\]<])")
# and at the start of a paragraph, what would read as a list item or a quote ("1\. Install", "\- a
# dash"); "\# text" stays, or the text would read as a heading
_BLOCK_START_ESCAPE = re.compile(r"^( {0,3})(?:\\([>+-])|(\d{1,9})\\([.)]))")


def _unescape(m: re.Match[str]) -> str:
    """An escaped character as written (a code span as it is)."""
    run = len(m.group(1) or "")
    return "\\" * (run // 2) + m.group(2) if run % 2 else m.group(0)


def _unescape_block_start(m: re.Match[str]) -> str:
    return m.group(1) + (m.group(2) or m.group(3) + m.group(4))


def _unescaped(markdown: str) -> str:
    """``markdown`` with trafilatura's escapes of inline syntax characters undone outside code."""
    lines, fenced = [], False
    for line in markdown.split("\n"):
        if not fenced:
            head, fence, code = line.partition("```")
            head = _BLOCK_START_ESCAPE.sub(_unescape_block_start, _ESCAPE_OR_CODE.sub(_unescape, head))
            if fence and head.strip() and "```" not in code:
                # a block that opens mid-line (an inline literal that wraps a line of the page's
                # source: "an implementation of ```"): its fence goes on a line of its own
                lines.append(head.rstrip())
                head = ""
            line = head + fence + code
        if line.count("```") % 2:
            fenced = not fenced
        lines.append(line)
    return "\n".join(lines)


_BODY = re.compile(r"<body[\s>]", re.IGNORECASE)
# A template's tag (Jinja, Django, Liquid: "{% block content %}", "{{ page.title }}"), looked for
# outside the page's code, where documentation about templates shows them.
_TEMPLATE_TAG = re.compile(r"\{%-?\s*\w[^{}]{0,200}?%\}|\{\{-?\s*[\w.|()' \"]{1,200}\}\}")
_HTML_CODE = re.compile(r"<(pre|code|script|textarea)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL)


def _read_html(path: Path, html: str) -> Document:
    """The page's main content as Markdown (trafilatura, leaning to recall): navigation, headers and
    footers left out, block elements on lines of their own, headings as ``#`` lines, emphasis as
    ``**``; characters as the page shows them (``my_file``, not Markdown's ``my\\_file``)."""
    try:
        import trafilatura
    except ImportError as exc:  # e.g. an lxml without lxml_html_clean, which justext imports
        raise MissingExtraError(f"{path}: reading HTML needs trafilatura and lxml_html_clean, and importing them "
                                f"failed ({' '.join(str(exc).split())}): pip install trafilatura lxml_html_clean"
                                ) from exc

    if not _BODY.search(html):  # a fragment (<p>...</p>): trafilatura reads a page's body only
        html = f"<html><body>{html}</body></html>"
    text = trafilatura.extract(html, output_format="markdown", include_formatting=True, include_tables=True,
                               include_links=False, include_images=False, include_comments=False,
                               favor_recall=True, prune_xpath=_HTML_NAVIGATION)
    text = None if text is None else _unescaped(text)
    if text is None or not text.strip():
        raise NotText(f"{path}: HTML page has no visible text")
    return _text_document(_shown(path), text, "markdown")


_OPF = "{http://www.idpf.org/2007/opf}"
_CONTAINER = "{urn:oasis:names:tc:opendocument:xmlns:container}"


def _read_epub(path: Path, data: bytes) -> str:
    """An EPUB book's chapters in reading order (the package's spine), each as Markdown
    (``_chapter_markdown``), one after another. The package is read with the standard library and
    lxml (the EPUB library on PyPI is AGPL): its container names the package file, whose manifest
    and spine give the chapters. No entity or network access while parsing; the chapters together
    decompress to at most ``MAX_DECOMPRESSED`` bytes."""
    import io
    import posixpath
    import zipfile
    import zlib
    from urllib.parse import unquote

    from lxml import etree

    parser = etree.XMLParser(resolve_entities=False, no_network=True)
    try:
        book = zipfile.ZipFile(io.BytesIO(data))
        container = etree.fromstring(book.read("META-INF/container.xml"), parser)
        rootfile = container.find(f".//{_CONTAINER}rootfile")
        package_path = rootfile.get("full-path") if rootfile is not None else None
        if not package_path:
            raise KeyError("META-INF/container.xml names no package file")
        package = etree.fromstring(book.read(package_path), parser)
        manifest = {item.get("id"): item for item in package.iter(f"{_OPF}item")}
        base = posixpath.dirname(package_path)
        chapters = []
        for ref in package.iter(f"{_OPF}itemref"):
            item = manifest.get(ref.get("idref"))
            if item is not None and "html" in (item.get("media-type") or "") and item.get("href"):
                chapters.append(posixpath.normpath(posixpath.join(base, unquote(item.get("href") or ""))))
        size = sum(book.getinfo(name).file_size for name in chapters)
    except (zipfile.BadZipFile, KeyError, etree.XMLSyntaxError, ValueError) as exc:
        raise DocumentError(f"{path}: not a readable EPUB book ({exc})") from None
    if size > MAX_DECOMPRESSED:
        raise DocumentError(f"{path}: its chapters decompress to more than {_size(MAX_DECOMPRESSED)}")
    try:
        pages = [book.read(name) for name in chapters]
    except (zipfile.BadZipFile, zlib.error, ValueError, OSError) as exc:  # a damaged member (bad CRC, bad data)
        raise DocumentError(f"{path}: not a readable EPUB book ({exc})") from None
    parts = [_chapter_markdown(page) for page in pages]
    return "\n\n".join(part for part in parts if part) + "\n" if any(parts) else ""


def _chapter_markdown(page: bytes) -> str:
    """A book's chapter (XHTML) as Markdown, all of it (markdownify): a chapter is content from end
    to end, with nothing for a web-page extractor to leave out, and trafilatura drops its title.
    Headings as ``#`` lines, characters as written (``my_file``), links and images as their text."""
    from bs4 import BeautifulSoup
    from markdownify import markdownify

    soup = BeautifulSoup(page, "lxml")  # as a browser reads it: the XML declaration and namespace aside
    for tag in soup(["head", "script", "style"]):
        tag.decompose()
    text = markdownify(str(soup.body or soup), heading_style="ATX", bullets="-", strip=["a", "img"],
                       escape_underscores=False, escape_asterisks=False)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


# Documents packed in a ZIP file, each read into Markdown: what it is, and its reader.
_PACKAGES: dict[str, tuple[str, Callable[[Path, bytes], str]]] = {
    "docx": ("Word document", _read_docx), "epub": ("EPUB book", _read_epub)}


def sample_documents() -> list[Document]:
    """The built-in sample corpus: Moby-Dick by Herman Melville, one document per chapter
    (public domain; the dataset's licence, PDDL/CC0, ships beside it as MOBY_DICK_LICENSE)."""
    ref = resources.files("chunktree") / "data" / "moby_dick.jsonl.gz"
    with ref.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as f:
        return _read_jsonl(SAMPLE_SOURCE, f.read().splitlines())
